package storetest

import (
	"fmt"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// testAgentsPerOrg: agents are keyed by (org, name). The same name lives
// once per org and once shared; an org's reads, updates and deletes never
// reach another org's agent; a list shows the org's own and the shared ones
// only, in (name, org) order, across pages.
func testAgentsPerOrg(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	put := func(org, name, prompt string) {
		t.Helper()
		if _, err := s.PutAgent(ctx, &agentmeshv1.Agent{Org: org, Name: name, SystemPrompt: prompt, Skills: []string{"go"}}, true, 0); err != nil {
			t.Fatalf("create %s/%s: %v", org, name, err)
		}
	}
	put("", "shared", "everyone")
	put("acme", "bot", "acme's")
	put("globex", "bot", "globex's")
	put("acme", "shared", "acme's own shared")
	put("globex", "zeta", "globex only")

	_, err := s.PutAgent(ctx, &agentmeshv1.Agent{Org: "acme", Name: "bot"}, true, 0)
	wantCode(t, "duplicate within an org", err, bus.ErrAlreadyExists)

	for _, tc := range []struct{ org, name, prompt string }{
		{"acme", "bot", "acme's"}, {"globex", "bot", "globex's"}, {"", "shared", "everyone"}, {"acme", "shared", "acme's own shared"},
	} {
		a, err := s.GetAgent(ctx, tc.org, tc.name)
		if err != nil {
			t.Fatalf("get %s/%s: %v", tc.org, tc.name, err)
		}
		if a.SystemPrompt != tc.prompt || a.Org != tc.org {
			t.Errorf("get %s/%s: got org %q prompt %q, want %q %q", tc.org, tc.name, a.Org, a.SystemPrompt, tc.org, tc.prompt)
		}
	}
	_, err = s.GetAgent(ctx, "acme", "zeta")
	wantCode(t, "another org's agent", err, bus.ErrNotFound)
	_, err = s.GetAgent(ctx, "", "bot")
	wantCode(t, "an org's agent is not shared", err, bus.ErrNotFound)

	// Update and delete by another org: not found, nothing changed.
	_, err = s.PutAgent(ctx, &agentmeshv1.Agent{Org: "acme", Name: "zeta", SystemPrompt: "stolen"}, false, 0)
	wantCode(t, "update another org's agent", err, bus.ErrNotFound)
	wantCode(t, "delete another org's agent", s.DeleteAgent(ctx, "acme", "zeta"), bus.ErrNotFound)
	if a, err := s.GetAgent(ctx, "globex", "zeta"); err != nil || a.SystemPrompt != "globex only" || a.Version != 1 {
		t.Errorf("globex's zeta after acme's attempts: got %v, %v; want unchanged", a, err)
	}
	upd, err := s.PutAgent(ctx, &agentmeshv1.Agent{Org: "acme", Name: "bot", SystemPrompt: "acme v2"}, false, 1)
	if err != nil || upd.Version != 2 {
		t.Fatalf("update acme/bot: got %v, %v", upd, err)
	}
	if a, _ := s.GetAgent(ctx, "globex", "bot"); a.GetSystemPrompt() != "globex's" || a.GetVersion() != 1 {
		t.Errorf("globex/bot after acme's update: got %v, want unchanged", a)
	}

	for _, size := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("list acme in pages of %d", size), func(t *testing.T) {
			var got []string
			tok := ""
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("pagination does not end")
				}
				page, next, err := s.ListAgents(ctx, store.AgentQuery{Org: "acme", PageSize: size, PageToken: tok})
				if err != nil {
					t.Fatalf("ListAgents: %v", err)
				}
				for _, a := range page {
					got = append(got, a.Org+"/"+a.Name)
				}
				if next == "" {
					break
				}
				tok = next
			}
			if want := "[acme/bot /shared acme/shared]"; fmt.Sprint(got) != want {
				t.Errorf("acme's list: got %v, want %s", got, want)
			}
		})
	}
	shared, _, err := s.ListAgents(ctx, store.AgentQuery{})
	if err != nil || len(shared) != 1 || shared[0].Name != "shared" || shared[0].Org != "" {
		t.Errorf("shared list: got %v, %v; want only the shared agent", shared, err)
	}

	if err := s.DeleteAgent(ctx, "acme", "bot"); err != nil {
		t.Fatalf("delete acme/bot: %v", err)
	}
	if _, err := s.GetAgent(ctx, "globex", "bot"); err != nil {
		t.Errorf("globex/bot after acme deleted its own: %v", err)
	}
}
