package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/stack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

var (
	secretRe = regexp.MustCompile(`(?m)^(?:signing )?secret: (\S+)$`)
	keyIDRe  = regexp.MustCompile(`key (key_[0-9A-Z]+)`)
	schedRe  = regexp.MustCompile(`schedule (sch_[0-9A-Z]+)`)
	epRe     = regexp.MustCompile(`endpoint (ep_[0-9A-Z]+)`)
	taskRe   = regexp.MustCompile(`started: task ([0-9A-Z]{26})`)
)

func match(t *testing.T, re *regexp.Regexp, out string) string {
	t.Helper()
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s not found in:\n%s", re, out)
	}
	return m[1]
}

// An org admin, from amctl alone, makes a key and rotates it, creates a
// nightly schedule and a webhook, triggers the schedule, and sees the run
// and the signed delivery of its end — nothing on the server's files.
func TestOpsCommandsOnARealStack(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(sink.Close)
	host := strings.TrimPrefix(sink.URL, "http://")
	script, err := scriptedmodel.ParseScript([]byte(`{"scenarios": [{"turns": [{"content": "the report"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := stack.Config{Script: script, SeedAgents: []*agentmeshv1.Agent{{Name: "helper", Tools: []string{"echo"}}},
		Router: router.Config{APIKeys: map[string]string{"acme-admin": "acme:admin"}, WebhookAllow: []string{host}}}
	cfg.Scheduler.Webhooks.Allow = []string{host}
	addr := realStackWith(t, cfg)
	admin := []string{"--api-key", "acme-admin"}

	// Keys: create, use, rotate; the old secret is refused.
	out := mustRun(t, addr, []string{"role operator", "secret: amk_"}, append(admin, "keys", "create", "ci", "--role", "operator")...)
	id, secret := match(t, keyIDRe, out), match(t, secretRe, out)
	mustRun(t, addr, nil, "--api-key", secret, "list")
	out = mustRun(t, addr, []string{"rotated"}, append(admin, "keys", "rotate", id)...)
	rotated := match(t, secretRe, out)
	poll.Until(t, 5*time.Second, func() error {
		if code, _, _ := amctl(t, addr, "--api-key", secret, "list"); code == 0 {
			return errString("the old secret still works")
		}
		return nil
	})
	mustRun(t, addr, nil, "--api-key", rotated, "list")
	mustRun(t, addr, []string{id, "api", "read-only"}, append(admin, "keys", "list")...)

	// A webhook, then a nightly schedule run now.
	out = mustRun(t, addr, []string{"task.completed", "signing secret: whsec_"}, append(admin, "webhooks", "create", sink.URL+"/hook", "--event", "task.completed")...)
	ep, whsec := match(t, epRe, out), match(t, secretRe, out)
	out = mustRun(t, addr, []string{"0 2 * * * in Europe/Paris", "next run:"}, append(admin, "schedules", "create", "--name", "nightly",
		"--cron", "0 2 * * *", "--tz", "Europe/Paris", "--agent", "helper", "--overlap", "allow", "write", "the", "report")...)
	sc := match(t, schedRe, out)
	out = mustRun(t, addr, []string{"started: task"}, append(admin, "schedules", "trigger", sc)...)
	task := match(t, taskRe, out)
	mustRun(t, addr, []string{task, "schedule:" + sc + ":now:"}, append(admin, "schedules", "runs", sc)...)

	var body []byte
	var req *http.Request
	poll.Until(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for i, r := range got {
			if strings.Contains(string(bodies[i]), task) {
				req, body = r, bodies[i]
				return nil
			}
		}
		return errString("no delivery of the run's end yet")
	})
	wh, err := standardwebhooks.NewWebhook(whsec)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, req.Header); err != nil {
		t.Errorf("the delivery does not verify: %v", err)
	}
	poll.Until(t, 20*time.Second, func() error {
		_, out, _ := amctl(t, addr, append(admin, "webhooks", "deliveries", ep)...)
		if !strings.Contains(out, "succeeded") || !strings.Contains(out, task) {
			return errString("the delivery log does not show it yet:\n" + out)
		}
		return nil
	})
	mustRun(t, addr, []string{"paused: holiday"}, append(admin, "schedules", "pause", sc, "--reason", "holiday")...)
	code, _, errOut := amctl(t, addr, append(admin, "schedules", "create", "--cron", "0 25 * * *", "--agent", "helper", "x")...)
	if code != exitError || !strings.Contains(errOut, "spec.cron") || !strings.Contains(errOut, "position 3") {
		t.Errorf("a bad cron: exit %d, %q", code, errOut)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
