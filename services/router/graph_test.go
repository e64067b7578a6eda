package router

import (
	"context"
	"errors"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/grpc/metadata"
)

func TestValidateGraphFields(t *testing.T) {
	tests := []struct {
		name  string
		req   *agentmeshv1.SubmitTaskRequest
		refs  bool
		field string // "" = accepted
	}{
		{"ids", &agentmeshv1.SubmitTaskRequest{DependsOn: []string{"01JA", "01JB"}}, false, ""},
		{"ref in SubmitTask", &agentmeshv1.SubmitTaskRequest{DependsOn: []string{"ref:a"}}, false, "depends_on[0]"},
		{"ref in SubmitTasks", &agentmeshv1.SubmitTaskRequest{DependsOn: []string{"01JA", "ref:a-1_b"}}, true, ""},
		{"bad ref", &agentmeshv1.SubmitTaskRequest{DependsOn: []string{"ref:a b"}}, true, "depends_on[0]"},
		{"bad id", &agentmeshv1.SubmitTaskRequest{DependsOn: []string{"01JA", "a.b"}}, false, "depends_on[1]"},
		{"too many", &agentmeshv1.SubmitTaskRequest{DependsOn: make([]string, maxDependsOn+1)}, false, "depends_on"},
		{"bad policy", &agentmeshv1.SubmitTaskRequest{DependencyPolicy: 7}, false, "dependency_policy"},
		{"tags", &agentmeshv1.SubmitTaskRequest{Tags: []string{"a", "b-c"}}, false, ""},
		{"empty tag", &agentmeshv1.SubmitTaskRequest{Tags: []string{"a", ""}}, false, "tags[1]"},
		{"tag with a space", &agentmeshv1.SubmitTaskRequest{Tags: []string{"a b"}}, false, "tags[0]"},
		{"duplicate tag", &agentmeshv1.SubmitTaskRequest{Tags: []string{"a", "a"}}, false, "tags[1]"},
		{"long tag", &agentmeshv1.SubmitTaskRequest{Tags: []string{strings.Repeat("t", maxTagBytes+1)}}, false, "tags[0]"},
		{"bad parent", &agentmeshv1.SubmitTaskRequest{ParentTaskId: "x y"}, false, "parent_task_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateGraphFields(tt.req, tt.refs)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) || be.Field != tt.field {
				t.Fatalf("got %v, want an error on %s", err, tt.field)
			}
		})
	}
}

func TestCreatedByNamesTheKey(t *testing.T) {
	anon := context.WithValue(t.Context(), callerKey{}, anonymous)
	if got := createdBy(anon); got != DefaultOrg {
		t.Errorf("authentication off: %q, want the org %q", got, DefaultOrg)
	}
	ctx := context.WithValue(metadata.NewIncomingContext(t.Context(), metadata.Pairs("authorization", "Bearer s3cret-key-1")),
		callerKey{}, Caller{KeyName: "ci-bot", Org: "acme", Role: RoleOperator})
	if got := createdBy(ctx); got != "acme:ci-bot" || strings.Contains(got, "s3cret") {
		t.Errorf("created_by %q: want the org and the key's name, never the key", got)
	}
}

// FuzzValidateGraphFields: never panics; a refusal names a field with a
// client error code; what passes has well-formed ids, refs and tags.
func FuzzValidateGraphFields(f *testing.F) {
	f.Add("01JA,ref:a", "etl,nightly", "01JP", int32(1), true)
	f.Add("ref:a b,", ",", "x y", int32(9), false)
	f.Fuzz(func(t *testing.T, deps, tags, parent string, policy int32, refs bool) {
		req := &agentmeshv1.SubmitTaskRequest{ParentTaskId: parent, DependencyPolicy: agentmeshv1.DependencyPolicy(policy)}
		if deps != "" {
			req.DependsOn = strings.Split(deps, ",")
		}
		if tags != "" {
			req.Tags = strings.Split(tags, ",")
		}
		err := validateGraphFields(req, refs)
		if err != nil {
			var be *bus.Error
			if !errors.As(err, &be) || be.Field == "" || (be.Code != bus.CodeInvalidArgument && be.Code != bus.CodeResourceExhausted) {
				t.Fatalf("refusal %v does not name a field with a client error code", err)
			}
			return
		}
		for _, d := range req.DependsOn {
			if ref, ok := strings.CutPrefix(d, "ref:"); ok {
				if !refs || !refRe.MatchString(ref) {
					t.Fatalf("accepted %q (refs %v)", d, refs)
				}
			} else if !idRe.MatchString(d) {
				t.Fatalf("accepted id %q", d)
			}
		}
		for _, tag := range req.Tags {
			if tag == "" || strings.ContainsAny(tag, " ,\t\n") {
				t.Fatalf("accepted tag %q", tag)
			}
		}
	})
}
