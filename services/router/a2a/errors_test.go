package a2a

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/agentmesh/agentmesh/services/stack"
)

// Bad requests get JSON-RPC error objects with the right code and words
// naming what is wrong, and the request's id; nothing runs.
func TestBadRequests(t *testing.T) {
	e := start(t)
	key := doortest.Secret(t, "a-op")
	msg := func(extra string) string {
		return `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"x"}]` + extra + `}}}`
	}
	for _, tt := range []struct {
		name, body string
		code       int64
		words      string
		id         string
	}{
		{"not JSON", `{"jsonrpc":`, door.CodeParseError, "not valid JSON", "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`, door.CodeInvalidRequest, "batch", "null"},
		{"no id", `{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"x"}}`, door.CodeInvalidRequest, "id: required", "null"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"tasks/get"}`, door.CodeInvalidRequest, "string or a number", "null"},
		{"old jsonrpc", `{"jsonrpc":"1.0","id":"a","method":"tasks/get"}`, door.CodeInvalidRequest, `jsonrpc: must be "2.0"`, `"a"`},
		{"unknown method", `{"jsonrpc":"2.0","id":2,"method":"tasks/list"}`, door.CodeMethodNotFound, "tasks/list", "2"},
		{"params array", `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":[1]}`, door.CodeInvalidParams, "params: must be an object", "2"},
		{"id wrong type", `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":7}}`, door.CodeInvalidParams, "params.id: must be a string", "2"},
		{"no task id", `{"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{}}`, door.CodeInvalidParams, "id: required", "2"},
		{"unknown task", `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":"01JNOSUCHTASK0000000000000"}}`, CodeTaskNotFound, `task "01JNOSUCHTASK0000000000000" not found`, "2"},
		{"no message", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{}}`, door.CodeInvalidParams, "message: required", "5"},
		{"agent role", strings.Replace(msg(""), `"user"`, `"agent"`, 1), door.CodeInvalidParams, "message.role", "5"},
		{"file part", strings.Replace(msg(""), `{"kind":"text","text":"x"}`, `{"kind":"file","file":{"uri":"https://x/y.pdf"}}`, 1), CodeContentTypeNotSupported, "file parts are not supported yet", "5"},
		{"bad data part", strings.Replace(msg(""), `{"kind":"text","text":"x"}`, `{"kind":"data","data":[1]}`, 1), door.CodeInvalidParams, "parts[0].data", "5"},
		{"bad context", msg(`,"contextId":"has space"`), door.CodeInvalidParams, "message.contextId", "5"},
		{"unknown agent", strings.Replace(msg(""), `]}}}`, `]},"metadata":{"agent":"ghost"}}}`, 1), door.CodeFailedPrecondition, `agent: no agent named "ghost"`, "5"},
		{"skills wrong type", strings.Replace(msg(""), `]}}}`, `]},"metadata":{"skills":"sql"}}}`, 1), door.CodeInvalidParams, "metadata.skills", "5"},
		{"control character in messageId", strings.Replace(msg(""), `"m1"`, `"m1\n"`, 1), door.CodeInvalidParams, "message.messageId: must not contain control characters", "5"},
		{"negative historyLength", strings.Replace(msg(""), `]}}}`, `]},"configuration":{"historyLength":-1}}}`, 1), door.CodeInvalidParams, "configuration.historyLength: must not be negative", "5"},
		{"push config", strings.Replace(msg(""), `]}}}`, `]},"configuration":{"pushNotificationConfig":{"url":"https://x"}}}}`, 1), CodePushNotificationNotSupported, "not supported yet", "5"},
		{"push set", `{"jsonrpc":"2.0","id":2,"method":"tasks/pushNotificationConfig/set","params":{"taskId":"x","pushNotificationConfig":{"url":"https://x"}}}`, CodePushNotificationNotSupported, "webhook delivery is not built", "2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := e.post(t, key, tt.body)
			if r.status != http.StatusOK || r.Error == nil || r.Error.Code != tt.code || !strings.Contains(r.Error.Message, tt.words) || string(r.ID) != tt.id {
				t.Errorf("got %d id %s %+v, want code %d with %q", r.status, r.ID, r.Error, tt.code, tt.words)
			}
			if r.Error != nil && !strings.Contains(string(r.Error.Data), `"error":`) {
				t.Errorf("the error's data %s does not repeat the message", r.Error.Data)
			}
		})
	}
	resp, err := http.Post(e.srv.URL+"/a2a", "application/json", strings.NewReader(strings.Repeat(" ", DefaultMaxBodyBytes+1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a big body without a key: %d, want 401 before it is read", resp.StatusCode)
	}
	// The card's path serves the card: JSON-RPC is at the card's url.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+CardPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST to the card's path: %d (Allow %q), want 405 (GET, HEAD)", resp.StatusCode, resp.Header.Get("Allow"))
	}
	req, _ = http.NewRequest(http.MethodPost, e.srv.URL+"/a2a", strings.NewReader(strings.Repeat(" ", DefaultMaxBodyBytes+1)))
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d, want 413", resp.StatusCode)
	}
}

// The JSON-RPC endpoint needs a key: none or an unknown one is 401 with
// the challenge. The card is public without a key (agentmesh, no org's
// agents), the org's with one, and 401 with an unknown one.
func TestAuthentication(t *testing.T) {
	e := start(t)
	for _, key := range []string{"", "key-nobody"} {
		r := e.call(t, key, MethodGet, map[string]any{"id": "x"})
		if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != door.Challenge || r.Error == nil || r.Error.Code != door.CodeUnauthenticated {
			t.Errorf("key %q: %d %q %+v", key, r.status, r.header.Get("WWW-Authenticate"), r.Error)
		}
	}
	card := func(key string) (int, AgentCard) {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/.well-known/agent-card.json", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c AgentCard
		_ = json.NewDecoder(resp.Body).Decode(&c)
		return resp.StatusCode, c
	}
	code, public := card("")
	if code != http.StatusOK || len(public.Skills) != 1 || public.Skills[0].ID != "run-task" || public.URL != e.srv.URL+"/a2a" ||
		public.SecuritySchemes["apiKey"].Scheme != "bearer" {
		t.Errorf("public card %d %+v", code, public)
	}
	if code, _ := card("key-nobody"); code != http.StatusUnauthorized {
		t.Errorf("the card with an unknown key: %d", code)
	}
	// Org B's card holds B's agents, not A's (B creates one A lacks).
	if _, err := agentmeshv1.NewAgentServiceClient(e.stack.Conn).CreateAgent(doortest.As(t, "b-admin"),
		&agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "b-only", Tools: []string{"echo"}}}); err != nil {
		t.Fatal(err)
	}
	_, b := card(doortest.Secret(t, "b-op"))
	_, a := card(doortest.Secret(t, "a-reader"))
	has := func(c AgentCard, id string) bool {
		for _, s := range c.Skills {
			if s.ID == id {
				return true
			}
		}
		return false
	}
	if !has(b, "agent:b-only") || has(a, "agent:b-only") || !has(a, "agent:careful") {
		t.Errorf("B's card %v, A's card %v", b.Skills, a.Skills)
	}
	r := e.call(t, doortest.Secret(t, "a-reader"), MethodExtendedCard, nil)
	var ext AgentCard
	if err := json.Unmarshal(r.Result, &ext); err != nil || !has(ext, "agent:careful") {
		t.Errorf("agent/getAuthenticatedExtendedCard answered %s %+v", r.Result, r.Error)
	}
}

// TestTenancyOverA2A repeats TestTenancy's matrix (services/e2e) over A2A:
// org B's key gets TaskNotFound for every one of org A's tasks — the words
// a task that never existed gets — through every method; B's contextId
// that names A's context starts a fresh context of B's; a reader may not
// send, cancel or decide; nothing of A's changes.
func TestTenancyOverA2A(t *testing.T) {
	e := start(t)
	blocked := e.stack.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: doortest.AgentCareful})
	blocked = e.stack.WaitStatus(t, "a-reader", blocked.Id, taskstate.Blocked)
	aKey := doortest.Secret(t, "a-op")
	r := e.call(t, aKey, MethodSend, map[string]any{"message": map[string]any{"role": "user", "messageId": "ma", "contextId": "ctx-a",
		"parts": []any{map[string]any{"kind": "text", "text": "hello"}}}, "metadata": map[string]any{"agent": doortest.AgentPlain}})
	var done Task
	if err := json.Unmarshal(r.Result, &done); err != nil || done.Status.State != StateCompleted {
		t.Fatalf("A's message answered %s %+v", r.Result, r.Error)
	}
	const ghost = "01JNEVEREXISTED0000000000A"
	bKey := doortest.Secret(t, "b-admin")
	for _, id := range []string{blocked.Id, done.ID} {
		for _, tt := range []struct {
			method string
			params map[string]any
		}{
			{MethodGet, map[string]any{"id": id}},
			{MethodCancel, map[string]any{"id": id}},
			{MethodResubscribe, map[string]any{"id": id}},
			{MethodSend, map[string]any{"message": map[string]any{"role": "user", "messageId": "mb", "taskId": id,
				"parts": []any{map[string]any{"kind": "text", "text": "approve"}}}}},
		} {
			for _, target := range []string{id, ghost} {
				params := tt.params
				if target == ghost {
					b, _ := json.Marshal(params)
					_ = json.Unmarshal([]byte(strings.ReplaceAll(string(b), id, ghost)), &params)
				}
				r := e.call(t, bKey, tt.method, params)
				if r.Error == nil || r.Error.Code != CodeTaskNotFound || r.Error.Message != fmt.Sprintf("task %q not found", target) {
					t.Errorf("B's %s of %s: %+v", tt.method, target, r.Error)
				}
			}
		}
	}
	// B naming A's context, or A's task as a context, gets a context of its
	// own: no continue_from A's.
	for i, ctxID := range []string{"ctx-a", done.ID} {
		r = e.call(t, bKey, MethodSend, map[string]any{"message": map[string]any{"role": "user", "messageId": fmt.Sprintf("mb-%d", i), "contextId": ctxID,
			"parts": []any{map[string]any{"kind": "text", "text": "continue theirs"}}}, "configuration": map[string]any{"blocking": false},
			"metadata": map[string]any{"agent": doortest.AgentPlain}})
		var bt Task
		if err := json.Unmarshal(r.Result, &bt); err != nil {
			t.Fatalf("B's message answered %s %+v", r.Result, r.Error)
		}
		got, err := e.stack.Tasks.GetTask(doortest.As(t, "b-admin"), &agentmeshv1.GetTaskRequest{Id: bt.ID})
		if err != nil || got.Task.ContinueFrom != "" {
			t.Errorf("B's task in context %s continues %q (%v)", ctxID, got.GetTask().GetContinueFrom(), err)
		}
	}

	// A's reader: no send, no cancel, no decision.
	rKey := doortest.Secret(t, "a-reader")
	for _, tt := range []struct {
		method string
		params map[string]any
		role   string
	}{
		{MethodSend, map[string]any{"message": map[string]any{"role": "user", "messageId": "mr", "parts": []any{map[string]any{"kind": "text", "text": "x"}}}}, "operator"},
		{MethodCancel, map[string]any{"id": blocked.Id}, "operator"},
		{MethodSend, map[string]any{"message": map[string]any{"role": "user", "messageId": "mr2", "taskId": blocked.Id,
			"parts": []any{map[string]any{"kind": "text", "text": "approve"}}}}, "approver"},
	} {
		r := e.call(t, rKey, tt.method, tt.params)
		if r.Error == nil || r.Error.Code != door.CodePermissionDenied || !strings.Contains(r.Error.Message, tt.role) {
			t.Errorf("the reader's %s: %+v, want permission denied naming %s", tt.method, r.Error, tt.role)
		}
	}
	after := e.stack.WaitStatus(t, "a-reader", blocked.Id, taskstate.Blocked)
	if after.LastEventSeq != blocked.LastEventSeq || after.GetPendingApproval().GetId() != blocked.GetPendingApproval().GetId() {
		t.Errorf("A's blocked task changed: %+v", after)
	}
}

// A messageId longer than the 200 bytes agentmesh records is cut on a rune
// boundary: a cut inside a multi-byte character made the task's metadata
// invalid UTF-8, which the API could not record (-32603 internal error).
func TestLongMessageIDIsCutOnARune(t *testing.T) {
	e := start(t)
	id := strings.Repeat("a", 199) + "€€"
	r := e.call(t, doortest.Secret(t, "a-op"), MethodSend, map[string]any{
		"message":       map[string]any{"role": "user", "messageId": id, "parts": []any{map[string]any{"kind": "text", "text": "hello"}}},
		"configuration": map[string]any{"blocking": false}, "metadata": map[string]any{"agent": doortest.AgentPlain}})
	var task Task
	if r.Error != nil || json.Unmarshal(r.Result, &task) != nil || len(task.History) == 0 {
		t.Fatalf("message/send with a long messageId answered %s %+v", r.Result, r.Error)
	}
	if got := task.History[0].MessageID; !utf8.ValidString(got) || !strings.HasPrefix(id, strings.TrimSuffix(got, "…")) {
		t.Errorf("the recorded messageId %q is not a valid cut of %q", got, id)
	}
}

// When the org's watches are all taken, a message still starts its task,
// and the answer says so: a blocking message/send answers with the task
// as it stands (as when MaxWait passes) — it answered an error, though the
// task ran, and a retry with a new messageId ran it twice — and
// message/stream's error event names the task and how to follow it.
func TestMessageWhenNoWatchIsLeft(t *testing.T) {
	st := doortest.StartWith(t, func(c *stack.Config) { c.Router.MaxWatchesPerOrg = 1 })
	e := startOn(t, st)
	held := st.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: doortest.AgentCareful})
	held = st.WaitStatus(t, "a-reader", held.Id, taskstate.Blocked)
	watch, err := st.Tasks.WatchTask(doortest.As(t, "a-op"), &agentmeshv1.WatchTaskRequest{Id: held.Id, AfterSeq: held.LastEventSeq})
	if err != nil {
		t.Fatal(err)
	}
	if md, _ := watch.Header(); md == nil {
		t.Fatal("the test's own watch was not admitted")
	}
	key := doortest.Secret(t, "a-op")
	send := func(method, messageID string) (rpcReply, []rpcReply) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": map[string]any{
			"message":  map[string]any{"role": "user", "messageId": messageID, "parts": []any{map[string]any{"kind": "text", "text": "slow one"}}},
			"metadata": map[string]any{"agent": doortest.AgentPlain}}})
		return e.post(t, key, string(body))
	}
	r, _ := send(MethodSend, "blocking-1")
	var task Task
	if r.Error != nil || json.Unmarshal(r.Result, &task) != nil || task.ID == "" || final(task.Status.State) {
		t.Fatalf("a blocking message/send with no watch left: %s %+v, want the running task", r.Result, r.Error)
	}
	_, events := send(MethodStream, "stream-1")
	if len(events) != 2 || events[0].Error != nil || events[1].Error == nil ||
		!strings.Contains(events[1].Error.Message, "tasks/get") || !strings.Contains(events[1].Error.Message, "WatchTask streams") {
		t.Fatalf("message/stream with no watch left: %+v", events)
	}
	var streamed Task
	if err := json.Unmarshal(events[0].Result, &streamed); err != nil || !strings.Contains(events[1].Error.Message, streamed.ID) {
		t.Errorf("the error event %q does not name the task %s", events[1].Error.Message, streamed.ID)
	}
}
