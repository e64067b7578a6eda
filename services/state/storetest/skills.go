package storetest

import (
	"fmt"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// skillTests are the conformance tests of the skill catalogue and agent
// versions (store.Skills).
var skillTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"Skills", testSkills},
	{"SkillsPerOrg", testSkillsPerOrg},
	{"AgentsOffering", testAgentsOffering},
	{"AgentVersions", testAgentVersions},
}

func testSkills(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	sk := &agentmeshv1.Skill{Org: "acme", Name: "sql", Description: "write SQL", RequiredTools: []string{"sql_query"},
		PromptTemplate: "You write careful SQL.", Config: map[string]string{"dialect": "postgres"}}
	got, err := s.PutSkill(ctx, sk, true, 0)
	if err != nil {
		t.Fatalf("PutSkill create: %v", err)
	}
	if got.Version != 1 || got.CreatedAt == nil || got.UpdatedAt == nil || got.Org != "acme" {
		t.Fatalf("created skill = %v, want version 1, times and org acme", got)
	}
	_, err = s.PutSkill(ctx, sk, true, 0)
	wantCode(t, "create twice", err, bus.ErrAlreadyExists)

	read, err := s.GetSkill(ctx, "acme", "sql")
	if err != nil {
		t.Fatalf("GetSkill: %v", err)
	}
	if read.Description != "write SQL" || read.PromptTemplate != sk.PromptTemplate || read.Config["dialect"] != "postgres" ||
		len(read.RequiredTools) != 1 || read.RequiredTools[0] != "sql_query" || read.Version != 1 {
		t.Fatalf("GetSkill = %v, want what was stored", read)
	}

	upd := proto.Clone(sk).(*agentmeshv1.Skill)
	upd.Description = "write SQL well"
	upd.Config = nil
	upd.RequiredTools = nil
	got, err = s.PutSkill(ctx, upd, false, 1)
	if err != nil {
		t.Fatalf("PutSkill update: %v", err)
	}
	if got.Version != 2 || !got.CreatedAt.AsTime().Equal(read.CreatedAt.AsTime()) {
		t.Fatalf("updated skill = %v, want version 2 and the created time kept", got)
	}
	read, err = s.GetSkill(ctx, "acme", "sql")
	if err != nil {
		t.Fatalf("GetSkill: %v", err)
	}
	if read.Description != "write SQL well" || len(read.Config) != 0 || len(read.RequiredTools) != 0 || read.Version != 2 {
		t.Fatalf("GetSkill after update = %v", read)
	}
	_, err = s.PutSkill(ctx, upd, false, 1)
	wantCode(t, "update at a stale version", err, bus.ErrFailedPrecondition)
	_, err = s.PutSkill(ctx, &agentmeshv1.Skill{Org: "acme", Name: "nope"}, false, 0)
	wantCode(t, "update of an absent skill", err, bus.ErrNotFound)

	if err := s.DeleteSkill(ctx, "acme", "sql"); err != nil {
		t.Fatalf("DeleteSkill: %v", err)
	}
	_, err = s.GetSkill(ctx, "acme", "sql")
	wantCode(t, "get after delete", err, bus.ErrNotFound)
	wantCode(t, "delete twice", s.DeleteSkill(ctx, "acme", "sql"), bus.ErrNotFound)
	// A deleted skill's name is free again, from version 1.
	got, err = s.PutSkill(ctx, sk, true, 0)
	if err != nil || got.Version != 1 {
		t.Fatalf("re-create = %v, %v; want version 1", got, err)
	}
}

func testSkillsPerOrg(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	put := func(org, name string) {
		t.Helper()
		if _, err := s.PutSkill(ctx, &agentmeshv1.Skill{Org: org, Name: name, Description: org + "/" + name}, true, 0); err != nil {
			t.Fatalf("PutSkill %s/%s: %v", org, name, err)
		}
	}
	put("", "general")
	put("", "sql")
	put("acme", "sql")
	put("acme", "zz")
	put("globex", "secret")

	// Never a fallback in the store: another org's skill is not found.
	_, err := s.GetSkill(ctx, "acme", "secret")
	wantCode(t, "another org's skill", err, bus.ErrNotFound)
	_, err = s.GetSkill(ctx, "acme", "general")
	wantCode(t, "a shared skill under an org", err, bus.ErrNotFound)
	if sk, err := s.GetSkill(ctx, "", "sql"); err != nil || sk.Description != "/sql" {
		t.Fatalf("shared sql = %v, %v", sk, err)
	}

	// acme lists the shared ones and its own, by name then org, in pages.
	var all []string
	tok := ""
	for range 10 {
		page, next, err := s.ListSkills(ctx, store.SkillQuery{Org: "acme", PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatalf("ListSkills: %v", err)
		}
		for _, sk := range page {
			all = append(all, sk.Org+"/"+sk.Name)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if got, want := fmt.Sprint(all), "[/general /sql acme/sql acme/zz]"; got != want {
		t.Fatalf("acme lists %s, want %s", got, want)
	}
	shared, _, err := s.ListSkills(ctx, store.SkillQuery{})
	if err != nil {
		t.Fatalf("ListSkills shared: %v", err)
	}
	if len(shared) != 2 {
		t.Fatalf("shared only lists %d skills, want 2", len(shared))
	}
	_, _, err = s.ListSkills(ctx, store.SkillQuery{PageToken: "!!"})
	wantCode(t, "bad page token", err, bus.ErrInvalidArgument)
	wantCode(t, "delete another org's skill", s.DeleteSkill(ctx, "acme", "secret"), bus.ErrNotFound)
}

func testAgentsOffering(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for _, a := range []*agentmeshv1.Agent{
		{Org: "", Name: "shared-sql", Skills: []string{"sql"}},
		{Org: "acme", Name: "acme-sql", Skills: []string{"general", "sql"}},
		{Org: "globex", Name: "globex-sql", Skills: []string{"sql"}},
		{Org: "acme", Name: "acme-go", Skills: []string{"go"}},
	} {
		if _, err := s.PutAgent(ctx, a, true, 0); err != nil {
			t.Fatalf("PutAgent %s: %v", a.Name, err)
		}
	}
	names := func(org string) string {
		t.Helper()
		as, err := s.AgentsOffering(ctx, org, "sql", 100)
		if err != nil {
			t.Fatalf("AgentsOffering: %v", err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.Org+"/"+a.Name)
		}
		return fmt.Sprint(out)
	}
	if got, want := names("acme"), "[acme/acme-sql]"; got != want {
		t.Errorf("acme's agents offering sql = %s, want %s", got, want)
	}
	if got, want := names(""), "[acme/acme-sql globex/globex-sql /shared-sql]"; got != want {
		t.Errorf("every agent offering sql = %s, want %s", got, want)
	}
}

func testAgentVersions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := &agentmeshv1.Agent{Org: "acme", Name: "helper", SystemPrompt: "v1"}
	if _, err := s.PutAgent(ctx, a, true, 0); err != nil {
		t.Fatalf("PutAgent: %v", err)
	}
	for i := 2; i <= 3; i++ {
		a.SystemPrompt = fmt.Sprintf("v%d", i)
		if _, err := s.PutAgent(ctx, a, false, 0); err != nil {
			t.Fatalf("PutAgent update: %v", err)
		}
	}
	// Another org's agent of the same name has versions of its own.
	if _, err := s.PutAgent(ctx, &agentmeshv1.Agent{Org: "globex", Name: "helper", SystemPrompt: "theirs"}, true, 0); err != nil {
		t.Fatalf("PutAgent globex: %v", err)
	}
	for v := int64(1); v <= 3; v++ {
		got, err := s.GetAgentVersion(ctx, "acme", "helper", v)
		if err != nil {
			t.Fatalf("GetAgentVersion %d: %v", v, err)
		}
		if got.Version != v || got.SystemPrompt != fmt.Sprintf("v%d", v) || got.Org != "acme" {
			t.Fatalf("version %d = %v", v, got)
		}
	}
	_, err := s.GetAgentVersion(ctx, "acme", "helper", 4)
	wantCode(t, "a version not yet made", err, bus.ErrNotFound)
	_, err = s.GetAgentVersion(ctx, "initech", "helper", 1)
	wantCode(t, "another org's agent version", err, bus.ErrNotFound)

	page, next, err := s.ListAgentVersions(ctx, "acme", "helper", 2, "")
	if err != nil {
		t.Fatalf("ListAgentVersions: %v", err)
	}
	if len(page) != 2 || page[0].Version != 3 || page[1].Version != 2 || next == "" {
		t.Fatalf("first page = %d versions (next %q), want 3 and 2", len(page), next)
	}
	page, next, err = s.ListAgentVersions(ctx, "acme", "helper", 2, next)
	if err != nil {
		t.Fatalf("ListAgentVersions page 2: %v", err)
	}
	if len(page) != 1 || page[0].Version != 1 || next != "" {
		t.Fatalf("second page = %v (next %q), want version 1 alone", page, next)
	}
	_, _, err = s.ListAgentVersions(ctx, "acme", "nobody", 0, "")
	wantCode(t, "versions of an absent agent", err, bus.ErrNotFound)

	// Deleting the agent drops its versions; a new agent of the name
	// starts again at version 1.
	if err := s.DeleteAgent(ctx, "acme", "helper"); err != nil {
		t.Fatalf("DeleteAgent: %v", err)
	}
	_, err = s.GetAgentVersion(ctx, "acme", "helper", 2)
	wantCode(t, "a deleted agent's version", err, bus.ErrNotFound)
	if _, err := s.PutAgent(ctx, &agentmeshv1.Agent{Org: "acme", Name: "helper", SystemPrompt: "new"}, true, 0); err != nil {
		t.Fatalf("PutAgent again: %v", err)
	}
	vs, _, err := s.ListAgentVersions(ctx, "acme", "helper", 0, "")
	if err != nil || len(vs) != 1 || vs[0].SystemPrompt != "new" {
		t.Fatalf("versions after re-create = %v, %v; want the new version 1 alone", vs, err)
	}
	if theirs, err := s.GetAgentVersion(ctx, "globex", "helper", 1); err != nil || theirs.SystemPrompt != "theirs" {
		t.Fatalf("globex's version 1 = %v, %v", theirs, err)
	}
}
