package router

import (
	"errors"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzValidateSubmit checks that validation never panics, that every
// refusal is InvalidArgument or ResourceExhausted naming a field, and that
// whatever it accepts is within the limits.
func FuzzValidateSubmit(f *testing.F) {
	f.Add("hello", "title", "helper", "", int32(0), "k", "v", "")
	f.Add("", "", "", "sql", int32(9), "", "", "idem")
	f.Add("x", "a\nb", "Bad", "a b", int32(-1), "k\x00", "v", strings.Repeat("i", 300))
	f.Add("x", "", "", "", int32(0), "k", "\xff", "")
	l := limits{maxInputBytes: 64, maxMetadataEntries: 4, maxMetadataBytes: 32}
	f.Fuzz(func(t *testing.T, input, title, agent, skill string, prio int32, mk, mv, idem string) {
		req := &agentmeshv1.SubmitTaskRequest{
			Input: input, Title: title, Agent: agent, Priority: agentmeshv1.Priority(prio), IdempotencyKey: idem,
		}
		if skill != "" {
			req.RequiredSkills = strings.Split(skill, ",")
		}
		if mk != "" || mv != "" {
			req.Metadata = map[string]string{mk: mv}
		}
		got, err := validateSubmit(req, l)
		if err != nil {
			var be *bus.Error
			if !errors.As(err, &be) || be.Field == "" ||
				(be.Code != bus.CodeInvalidArgument && be.Code != bus.CodeResourceExhausted) {
				t.Fatalf("refusal %v does not name a field with a client error code", err)
			}
			return
		}
		switch {
		case strings.TrimSpace(input) == "" || len(input) > l.maxInputBytes:
			t.Fatalf("accepted input %q", input)
		case agent != "" && len(req.RequiredSkills) > 0:
			t.Fatalf("accepted agent %q with skills %q", agent, req.RequiredSkills)
		case agent != "" && !nameRe.MatchString(agent):
			t.Fatalf("accepted agent %q", agent)
		case got < agentmeshv1.Priority_PRIORITY_BACKLOG || got > agentmeshv1.Priority_PRIORITY_CRITICAL:
			t.Fatalf("accepted priority %v", got)
		case len(mk)+len(mv) > l.maxMetadataBytes:
			t.Fatalf("accepted metadata of %d bytes", len(mk)+len(mv))
		case strings.ContainsAny(title, "\n\r\x00"):
			t.Fatalf("accepted title %q", title)
		}
		// What the doors that call the API in process hand it must go on
		// the bus: a string that is not UTF-8 does not encode (Internal).
		if _, err := proto.Marshal(req); err != nil {
			t.Fatalf("accepted a request that does not encode: %v", err)
		}
	})
}

func TestCheckID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"01J9ZK3M8Q4W5E6R7T8Y9U0I1O", true},
		{"abc_-1", true},
		{"", false},
		{"a.b", false},
		{"*", false},
		{">", false},
		{"a b", false},
		{strings.Repeat("a", 129), false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if err := checkID("id", tt.id); (err == nil) != tt.ok {
				t.Fatalf("checkID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
			}
		})
	}
}

// An agent with a value outside an enum — an unknown model tool_protocol, a
// tool policy number the API does not define — is refused at create and at
// update with InvalidArgument naming the field, before anything is stored.
func TestAgentEnumsRefusedAtTheEdge(t *testing.T) {
	e := start(t, Config{})
	bad := map[string]*agentmeshv1.Agent{
		"agent.model.tool_protocol":  {Name: "odd", Model: &agentmeshv1.ModelSettings{ToolProtocol: "xml-tools"}},
		"agent.tool_policies[shell]": {Name: "odd", ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": 42}},
	}
	for field, agent := range bad {
		for _, op := range []string{"create", "update"} {
			t.Run(op+" "+field, func(t *testing.T) {
				var err error
				if op == "create" {
					_, err = e.agents.CreateAgent(testCtx(t), &agentmeshv1.CreateAgentRequest{Agent: agent})
				} else {
					_, err = e.agents.UpdateAgent(testCtx(t), &agentmeshv1.UpdateAgentRequest{Agent: agent})
				}
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("got %v, want InvalidArgument", err)
				}
				named := false
				for _, d := range st.Details() {
					if br, ok := d.(*errdetails.BadRequest); ok {
						for _, v := range br.FieldViolations {
							named = named || v.Field == field
						}
					}
				}
				if !named || !strings.Contains(st.Message(), field) {
					t.Fatalf("got %q with details %v, want the field %s named", st.Message(), st.Details(), field)
				}
			})
		}
	}
}
