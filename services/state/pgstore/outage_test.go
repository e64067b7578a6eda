package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// With Postgres stopped, what a caller is told — the bus message of the
// error, which the router turns into the UNAVAILABLE status — names the
// operation and that the database is unavailable, never the database's
// user, name or address; the full cause stays in the local error (for the
// state service's log).
func TestUnavailableNamesNothingOfTheDatabase(t *testing.T) {
	c := pgtest.Own(t)
	const db = "secretdb"
	if err := c.CreateDatabase(db); err != nil {
		t.Fatal(err)
	}
	dbURL := c.URL(db)
	s := open(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", Input: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume() })
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{u.User.Username(), db, u.Hostname(), u.Port()}
	calls := map[string]func() error{
		"GetTask": func() error { _, err := s.GetTask(ctx, task.Id); return err },
		"CreateTask": func() error {
			_, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", Input: "y"})
			return err
		},
		"ListTasks": func() error { _, _, err := s.ListTasks(ctx, store.TaskQuery{Org: "o"}); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, bus.ErrUnavailable) {
				t.Fatalf("got %v, want unavailable", err)
			}
			told := bus.ToProto(err).Message
			if !strings.Contains(told, "database unavailable") {
				t.Errorf("caller told %q, want it to say the database is unavailable", told)
			}
			for _, secret := range secrets {
				if strings.Contains(told, secret) {
					t.Errorf("caller told %q, which names %q of the database's URL", told, secret)
				}
			}
			if !strings.Contains(err.Error(), "cause:") {
				t.Errorf("local error %q lost its cause (the log needs it)", err)
			}
		})
	}
}
