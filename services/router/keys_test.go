package router

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func sum(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

func writeKeys(t *testing.T, path string, entries ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(`{"keys": [`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as an operator's tooling would
		t.Fatal(err)
	}
}

func entry(name, org, role, key string) string {
	return fmt.Sprintf(`{"name": %q, "org": %q, "role": %q, "sha256": %q}`, name, org, role, sum(key))
}

// Keys kept hashed in a file authenticate; a change of the file takes
// effect without a restart; a broken file leaves the keys as they were.
func TestKeysFileHashedAndReloaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, path, entry("alice", "acme", "reader", "alice-secret"))
	e := start(t, Config{KeysFile: path, KeysReload: 20 * time.Millisecond})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "acme"})
	get := func(key string) codes.Code {
		_, err := e.tasks.GetTask(withKey(testCtx(t), "authorization", "Bearer "+key), &agentmeshv1.GetTaskRequest{Id: task.Id})
		return status.Code(err)
	}
	if got := get("alice-secret"); got != codes.OK {
		t.Fatalf("alice: %v, want OK", got)
	}
	for _, k := range []string{sum("alice-secret"), "bob-secret", ""} {
		if got := get(k); got != codes.Unauthenticated {
			t.Errorf("key %q: %v, want Unauthenticated (the file holds hashes, not keys)", k, got)
		}
	}

	writeKeys(t, path, entry("bob", "acme", "reader", "bob-secret"))
	poll.Until(t, 20*time.Second, func() error {
		if get("bob-secret") != codes.OK || get("alice-secret") != codes.Unauthenticated {
			return fmt.Errorf("the new keys file is not in force yet")
		}
		return nil
	})

	// A broken file is refused; bob's key keeps working.
	if err := os.WriteFile(path, []byte(`{"keys": [{"name": "eve", "org": "acme", "role": "god", "sha256": "00"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.ReloadKeys(); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("reload of a broken file: %v, want an error naming the field", err)
	}
	if got := get("bob-secret"); got != codes.OK {
		t.Fatalf("bob after a broken reload: %v, want OK", got)
	}
}

func TestParseKeysFile(t *testing.T) {
	good := entry("ci", "acme", "operator", "k1")
	tests := []struct {
		name, data, err string
	}{
		{"good", `{"keys": [` + good + `]}`, ""},
		{"platform", `{"keys": [` + entry("ops", "", "platform", "k2") + `]}`, ""},
		{"unknown role", `{"keys": [` + entry("ci", "acme", "root", "k1") + `]}`, "unknown role"},
		{"bad org", `{"keys": [` + entry("ci", "Acme Corp", "reader", "k1") + `]}`, "org"},
		{"double hyphen org", `{"keys": [` + entry("ci", "a--b", "reader", "k1") + `]}`, "org"},
		{"org on a platform key", `{"keys": [` + entry("ops", "acme", "platform", "k1") + `]}`, "platform key names no org"},
		{"short hash", `{"keys": [{"name": "ci", "org": "acme", "role": "reader", "sha256": "abcd"}]}`, "64 hex digits"},
		{"duplicate name", `{"keys": [` + good + `,` + entry("ci", "acme", "reader", "k9") + `]}`, "appears twice"},
		{"duplicate key", `{"keys": [` + good + `,` + entry("ci2", "globex", "reader", "k1") + `]}`, "same key"},
		{"unknown field", `{"keys": [], "admins": []}`, "unknown field"},
		{"not JSON", `keys: []`, "keys file"},
		{"trailing data", `{"keys": []} {}`, "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeysFile([]byte(tc.data))
			if tc.err == "" && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func FuzzParseKeysFile(f *testing.F) {
	f.Add([]byte(`{"keys": [` + entry("ci", "acme", "operator", "k1") + `]}`))
	f.Add([]byte(`{"keys": []}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeysFile(data)
		if err != nil {
			return
		}
		for _, k := range keys {
			if checkKey(k) != nil {
				t.Fatalf("accepted an invalid key %+v", k)
			}
		}
	})
}

// The role table: what each role may call, PermissionDenied naming the
// role needed otherwise (before any request reaches the bus).
func TestRoles(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{
		"r": "acme:reader", "o": "acme:operator", "ap": "acme:approver", "ad": "acme", "p": "*:platform",
	}})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "acme"})
	approvals := agentmeshv1.NewApprovalServiceClient(e.conn)
	graphs := agentmeshv1.NewTaskGraphServiceClient(e.conn)
	metrics := agentmeshv1.NewMetricsServiceClient(e.conn)
	calls := map[string]func(key string) error{
		"SubmitTask": func(k string) error {
			_, err := e.tasks.SubmitTask(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.SubmitTaskRequest{Input: "hi", Agent: "helper"})
			return err
		},
		"CancelTask": func(k string) error {
			_, err := e.tasks.CancelTask(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.CancelTaskRequest{Id: "01NOPE"})
			return err
		},
		"GetTask": func(k string) error {
			_, err := e.tasks.GetTask(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.GetTaskRequest{Id: task.Id})
			return err
		},
		"ApproveToolCall": func(k string) error {
			_, err := approvals.ApproveToolCall(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.ApproveToolCallRequest{ApprovalId: task.Id + "-a3"})
			return err
		},
		"SubmitTasks": func(k string) error {
			_, err := graphs.SubmitTasks(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.SubmitTasksRequest{})
			return err
		},
		"GetMetrics": func(k string) error {
			_, err := metrics.GetMetrics(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.GetMetricsRequest{})
			return err
		},
		"CreateAgent": func(k string) error {
			_, err := e.agents.CreateAgent(withKey(testCtx(t), "x-api-key", k), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "new-" + k}})
			return err
		},
	}
	// want: "" = allowed (whatever the bus answers next), else the role
	// the PermissionDenied must name.
	tests := []struct {
		key, call, want string
	}{
		{"r", "GetTask", ""}, {"r", "SubmitTask", "operator"}, {"r", "CancelTask", "operator"}, {"r", "ApproveToolCall", "approver"}, {"r", "CreateAgent", "admin"},
		{"o", "GetTask", ""}, {"o", "SubmitTask", ""}, {"o", "CancelTask", ""}, {"o", "ApproveToolCall", "approver"}, {"o", "CreateAgent", "admin"},
		{"ap", "GetTask", ""}, {"ap", "SubmitTask", "operator"}, {"ap", "ApproveToolCall", ""}, {"ap", "CreateAgent", "admin"},
		{"ad", "GetTask", ""}, {"ad", "SubmitTask", ""}, {"ad", "ApproveToolCall", ""}, {"ad", "CreateAgent", ""},
		{"p", "GetTask", "a key of an org"}, {"p", "SubmitTask", "a key of an org"}, {"p", "CreateAgent", ""},
		// Graphs and CRUD are the operator's, metrics a reader's.
		{"r", "SubmitTasks", "operator"}, {"o", "SubmitTasks", ""}, {"r", "GetMetrics", ""}, {"o", "GetMetrics", ""},
	}
	for _, tc := range tests {
		t.Run(tc.key+" "+tc.call, func(t *testing.T) {
			err := calls[tc.call](tc.key)
			st := status.Convert(err)
			if tc.want == "" {
				if st.Code() == codes.PermissionDenied || st.Code() == codes.Unauthenticated {
					t.Fatalf("got %v %q, want it allowed", st.Code(), st.Message())
				}
				return
			}
			if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("got %v %q, want PermissionDenied naming %q", st.Code(), st.Message(), tc.want)
			}
		})
	}
	// Every RPC of the API is in the table: TestEveryPublicRPCIsImplementedAndHasARole.
}

// SIGHUP reloads the keys file at once (the periodic check is an hour
// away here).
func TestKeysFileReloadedOnSIGHUP(t *testing.T) {
	// This process catches SIGHUP too, so an early signal cannot kill it.
	own := make(chan os.Signal, 16)
	signal.Notify(own, syscall.SIGHUP)
	defer signal.Stop(own)

	path := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, path, entry("alice", "acme", "reader", "alice-secret"))
	e := start(t, Config{KeysFile: path, KeysReload: time.Hour})
	get := func(key string) codes.Code {
		_, err := e.tasks.ListTasks(withKey(testCtx(t), "x-api-key", key), &agentmeshv1.ListTasksRequest{})
		return status.Code(err)
	}
	writeKeys(t, path, entry("bob", "acme", "reader", "bob-secret"))
	if got := get("bob-secret"); got != codes.Unauthenticated {
		t.Fatalf("bob before any reload: %v, want Unauthenticated", got)
	}
	poll.Until(t, 20*time.Second, func() error {
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if get("bob-secret") != codes.OK {
			return fmt.Errorf("bob's key not in force after SIGHUP")
		}
		return nil
	})
	if got := get("alice-secret"); got != codes.Unauthenticated {
		t.Fatalf("alice after the reload: %v, want Unauthenticated", got)
	}
}
