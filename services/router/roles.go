package router

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Role is what an API key may do within its org.
type Role string

// The roles. Each org role includes reader; admin includes every org role.
// A platform key belongs to no org: it manages the shared agents, reads
// the agent catalogue and the tool list, and manages every org's API keys,
// nothing else.
const (
	// RoleReader reads tasks, histories, usage, approvals, agents, tools.
	RoleReader Role = "reader"
	// RoleOperator also submits and cancels tasks.
	RoleOperator Role = "operator"
	// RoleApprover also decides approvals and agent proposals.
	RoleApprover Role = "approver"
	// RoleAdmin may do everything in its org: define agents, keys, taps,
	// and everything the other roles may.
	RoleAdmin Role = "admin"
	// RolePlatform is the deployment operator's key: it creates, changes
	// and deletes the shared agents every org may use.
	RolePlatform Role = "platform"
)

func (r Role) valid() bool {
	switch r {
	case RoleReader, RoleOperator, RoleApprover, RoleAdmin, RolePlatform:
		return true
	}
	return false
}

// Satisfies reports whether a key of role r may call an RPC that needs
// role need.
func (r Role) Satisfies(need Role) bool {
	switch {
	case r == need:
		return true
	case r == RolePlatform || need == RolePlatform:
		return false
	case r == RoleAdmin:
		return true
	case need == RoleReader:
		return r == RoleOperator || r == RoleApprover
	}
	return false
}

func method(service, rpc string) string { return "/" + service + "/" + rpc }

// MethodRoles is the one table of who may call what: every agentmesh RPC
// and the role it needs. An agentmesh RPC missing from it needs admin (a
// new RPC is closed until it is placed here). Handlers that need a finer
// check call requireRole.
var MethodRoles = map[string]Role{
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "SubmitTask"):     RoleOperator,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "CancelTask"):     RoleOperator,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "GetTask"):        RoleReader,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "ListTasks"):      RoleReader,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "WatchTask"):      RoleReader,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "WatchTasks"):     RoleReader,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "GetTaskHistory"): RoleReader,
	method(agentmeshv1.TaskService_ServiceDesc.ServiceName, "GetUsage"):       RoleReader,

	method(agentmeshv1.TaskGraphService_ServiceDesc.ServiceName, "SubmitTasks"): RoleOperator,
	method(agentmeshv1.TaskGraphService_ServiceDesc.ServiceName, "UpdateTask"):  RoleOperator,
	method(agentmeshv1.TaskGraphService_ServiceDesc.ServiceName, "CancelTasks"): RoleOperator,
	method(agentmeshv1.TaskGraphService_ServiceDesc.ServiceName, "DeleteTask"):  RoleOperator,

	method(agentmeshv1.MetricsService_ServiceDesc.ServiceName, "GetMetrics"): RoleReader,

	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "CreateAgent"):       RoleAdmin,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "UpdateAgent"):       RoleAdmin,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "DeleteAgent"):       RoleAdmin,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "GetAgent"):          RoleReader,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "ListAgents"):        RoleReader,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "MatchAgents"):       RoleReader,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "ListAgentVersions"): RoleReader,

	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "CreateSkill"): RoleAdmin,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "UpdateSkill"): RoleAdmin,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "DeleteSkill"): RoleAdmin,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "GetSkill"):    RoleReader,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "ListSkills"):  RoleReader,

	method(agentmeshv1.ApprovalService_ServiceDesc.ServiceName, "ListApprovals"):   RoleReader,
	method(agentmeshv1.ApprovalService_ServiceDesc.ServiceName, "ApproveToolCall"): RoleApprover,
	method(agentmeshv1.ApprovalService_ServiceDesc.ServiceName, "RejectToolCall"):  RoleApprover,

	method(agentmeshv1.ProposalService_ServiceDesc.ServiceName, "ListProposals"):   RoleReader,
	method(agentmeshv1.ProposalService_ServiceDesc.ServiceName, "GetProposal"):     RoleReader,
	method(agentmeshv1.ProposalService_ServiceDesc.ServiceName, "ApproveProposal"): RoleApprover,
	method(agentmeshv1.ProposalService_ServiceDesc.ServiceName, "RejectProposal"):  RoleApprover,

	method(agentmeshv1.ToolService_ServiceDesc.ServiceName, "ListTools"): RoleReader,

	method(agentmeshv1.TapService_ServiceDesc.ServiceName, "CreateTap"): RoleAdmin,

	method(agentmeshv1.RunService_ServiceDesc.ServiceName, "StartRun"):  RoleOperator,
	method(agentmeshv1.RunService_ServiceDesc.ServiceName, "GetRun"):    RoleReader,
	method(agentmeshv1.RunService_ServiceDesc.ServiceName, "CancelRun"): RoleOperator,

	method(agentmeshv1.VersionService_ServiceDesc.ServiceName, "GetVersion"): RoleReader,

	method(agentmeshv1.ExecutorService_ServiceDesc.ServiceName, "ListExecutors"): RoleAdmin,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "CreateKey"):          RoleAdmin,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "ListKeys"):           RoleAdmin,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "RevokeKey"):          RoleAdmin,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "RotateKey"):          RoleAdmin,

	// A schedule submits tasks later: changing one needs the right to
	// submit (its runs get no more than its creator's role; state checks).
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "CreateSchedule"):  RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "UpdateSchedule"):  RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "PauseSchedule"):   RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "ResumeSchedule"):  RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "DeleteSchedule"):  RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "TriggerSchedule"): RoleOperator,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "GetSchedule"):     RoleReader,
	method(agentmeshv1.ScheduleService_ServiceDesc.ServiceName, "ListSchedules"):   RoleReader,

	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "CreateWebhookEndpoint"): RoleAdmin,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "UpdateWebhookEndpoint"): RoleAdmin,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "DeleteWebhookEndpoint"): RoleAdmin,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "RotateWebhookSecret"):   RoleAdmin,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "RedeliverWebhook"):      RoleAdmin,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "GetWebhookEndpoint"):    RoleReader,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "ListWebhookEndpoints"):  RoleReader,
	method(agentmeshv1.WebhookService_ServiceDesc.ServiceName, "ListWebhookDeliveries"): RoleReader,

	// What agents keep (issue 30; memory.go).
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "GetState"):       RoleReader,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "ListState"):      RoleReader,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "SetState"):       RoleOperator,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "DeleteState"):    RoleOperator,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "ListMemories"):   RoleReader,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "GetMemory"):      RoleReader,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "SearchMemories"): RoleReader,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "DeleteMemory"):   RoleAdmin,
	method(agentmeshv1.MemoryService_ServiceDesc.ServiceName, "PruneMemories"):  RoleAdmin,
	method(agentmeshv1.ThreadService_ServiceDesc.ServiceName, "ListThreads"):    RoleReader,
	method(agentmeshv1.ThreadService_ServiceDesc.ServiceName, "GetThread"):      RoleReader,
	method(agentmeshv1.ThreadService_ServiceDesc.ServiceName, "DeleteThread"):   RoleOperator,
}

// platformMethods are the RPCs a platform key may call: the agent and
// skill catalogues (where it acts on the shared ones), the tool list and
// KeyService (every org's keys).
var platformMethods = map[string]bool{
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "CreateAgent"):       true,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "UpdateAgent"):       true,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "DeleteAgent"):       true,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "GetAgent"):          true,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "ListAgents"):        true,
	method(agentmeshv1.AgentService_ServiceDesc.ServiceName, "ListAgentVersions"): true,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "CreateSkill"):       true,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "UpdateSkill"):       true,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "DeleteSkill"):       true,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "GetSkill"):          true,
	method(agentmeshv1.SkillService_ServiceDesc.ServiceName, "ListSkills"):        true,
	method(agentmeshv1.ToolService_ServiceDesc.ServiceName, "ListTools"):          true,
	method(agentmeshv1.VersionService_ServiceDesc.ServiceName, "GetVersion"):      true,
	method(agentmeshv1.ExecutorService_ServiceDesc.ServiceName, "ListExecutors"):  true,
	// Every org's API keys (the platform key names the org).
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "CreateKey"): true,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "ListKeys"):  true,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "RevokeKey"): true,
	method(agentmeshv1.KeyService_ServiceDesc.ServiceName, "RotateKey"): true,
}

// neededRole is the role an RPC needs (MethodRoles, admin when absent).
func neededRole(fullMethod string) Role {
	if r, ok := MethodRoles[fullMethod]; ok {
		return r
	}
	return RoleAdmin
}

// Caller is who made an RPC: the key's name, org and role.
type Caller struct {
	KeyName string
	Org     string
	Role    Role
}

type callerKey struct{}

// CallerFrom returns the authenticated caller of an RPC (ok false when
// the RPC did not pass authentication: health, reflection).
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// orgFrom returns the caller's org that authentication put in ctx ("" for
// a platform key).
func orgFrom(ctx context.Context) string {
	c, _ := CallerFrom(ctx)
	return c.Org
}

// keyNameFrom returns the name of the caller's key.
func keyNameFrom(ctx context.Context) string {
	c, _ := CallerFrom(ctx)
	return c.KeyName
}

// RequireRole answers PermissionDenied naming the role needed unless the
// caller's key has role need (or one that includes it). Handlers call it
// for checks finer than the method table; the interceptor already applied
// MethodRoles before any handler runs.
func RequireRole(ctx context.Context, need Role) error {
	c, ok := CallerFrom(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "not authenticated")
	}
	if c.Role.Satisfies(need) {
		return nil
	}
	return denied(c, need, "")
}

func denied(c Caller, need Role, what string) error {
	if what == "" {
		what = "this"
	}
	alt := ""
	if need != RoleAdmin && need != RolePlatform {
		alt = " (or admin)"
	}
	return status.Errorf(codes.PermissionDenied, "%s needs role %s%s; key %q has role %s", what, need, alt, c.KeyName, c.Role)
}

// authorize applies the method table to an authenticated caller.
func authorize(c Caller, fullMethod string) error {
	if c.Role == RolePlatform {
		if platformMethods[fullMethod] {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s needs a key of an org; key %q is a platform key (it manages shared agents only)", shortMethod(fullMethod), c.KeyName)
	}
	need := neededRole(fullMethod)
	if c.Role.Satisfies(need) {
		return nil
	}
	return denied(c, need, shortMethod(fullMethod))
}

// shortMethod turns "/agentmesh.v1.TaskService/SubmitTask" into "SubmitTask".
func shortMethod(fullMethod string) string {
	for i := len(fullMethod) - 1; i >= 0; i-- {
		if fullMethod[i] == '/' {
			return fullMethod[i+1:]
		}
	}
	return fullMethod
}

// String makes a Role print as its name.
func (r Role) String() string { return string(r) }
