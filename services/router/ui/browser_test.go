package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/router/ui"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// The dashboard in a real browser: headless Chromium (Debian's chromium
// package) driven by chromedp against a whole stack in this process (real
// NATS, the embedded store, agent child processes, the scripted model),
// the dashboard mounted on the router's HTTP listener as agentmesh dev
// mounts it.

func TestMain(m *testing.M) {
	child.RunIfChild()
	pgtest.Main(m) // a throwaway Postgres for the benchmarks that ask for one
}

// browserScript drives the scripted model:
//   - "live ...": three slow turns (two echo calls), so steps arrive one by
//     one while the page is open;
//   - anything else: one echo call of the input, then an answer quoting it.
const browserScript = `{"scenarios": [
  {"match": "^live", "turns": [
    {"delay_ms": 1200, "content": "Looking into it.", "tool_calls": [{"name": "echo", "arguments": {"text": "step one"}}]},
    {"delay_ms": 1200, "content": "Second thought.", "tool_calls": [{"name": "echo", "arguments": {"text": "step two"}}]},
    {"delay_ms": 600, "content": "live final answer"}
  ]},
  {"turns": [
    {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
    {"content": "final answer: {{last_tool_result}}"}
  ]}
]}`

// The keys of the browser tests.
var browserKeys = map[string]string{
	"k-acme":   "acme",
	"k-reader": "acme:reader",
	"k-globex": "globex",
}

// chromium returns the browser to drive: a missing one skips the test,
// or fails it under CI=true (CI never skips silently).
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and Chromium is required for the dashboard's browser tests: apt-get install chromium")
	}
	t.Skip("no Chromium (apt-get install chromium): the dashboard's browser tests need it")
	return ""
}

// dash is a stack with the dashboard, and a browser.
type dash struct {
	url     string // http://host:port
	grpc    string
	conn    *grpc.ClientConn
	st      *stack.Stack
	browser context.Context
}

func startDash(t testing.TB) *dash {
	t.Helper()
	exe := chromium(t)
	d := startStack(t)
	d.startBrowser(t, exe)
	return d
}

// startStack starts a stack with the dashboard (no browser); tweak, when
// given, changes its configuration first.
func startStack(t testing.TB, tweak ...func(*stack.Config)) *dash {
	t.Helper()
	dir := t.TempDir()
	script, err := scriptedmodel.ParseScript([]byte(browserScript))
	if err != nil {
		t.Fatal(err)
	}
	script.Scenarios = append(memoryScenarios(t), script.Scenarios...)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("AGENTMESH_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cfg := stack.Config{DataDir: dir, NATSHost: "127.0.0.1", NATSPort: -1, Script: script, Log: log,
		SeedSkills: stack.DefaultSkills(), SeedAgents: []*agentmeshv1.Agent{stack.DefaultAgent()}}
	cfg.Router.APIKeys = browserKeys
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Router.HTTPListen = "127.0.0.1:0"
	cfg.Router.WatchTasksInterval = 100 * time.Millisecond
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	cfg.Executor.WallTime = time.Minute
	cfg.Executor.DrainGrace = time.Second
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("stack: %v", err)
	}
	if _, err := ui.Mount(st.Router(), ui.Config{}, log); err != nil {
		cancel()
		st.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the stack did not stop within 30s")
		}
	})
	conn, err := grpc.NewClient(st.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &dash{url: "http://" + st.HTTPAddr(), grpc: st.Addr(), conn: conn, st: st}
}

// startBrowser starts headless Chromium (exe) for the dashboard.
func (d *dash) startBrowser(t testing.TB, exe string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1366, 860), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	d.browser = bctx
}

// tab is a fresh browser profile (its own cookies) with a deadline; the
// page's uncaught exceptions fail the test.
func (d *dash) tab(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(d.browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				t.Errorf("uncaught exception in the page (%s:%d): %s", m.URL, m.Line+1, m)
			}
		}
	}()
	return ctx
}

// signIn signs key in through the sign-in form and waits for the task list.
func (d *dash) signIn(t testing.TB, ctx context.Context, key string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(d.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.SendKeys(chromedp.CSS(`#key`), key),
		chromedp.Submit(chromedp.CSS(`#key`)),
		chromedp.WaitVisible(chromedp.CSS(`table.tasks`)),
	); err != nil {
		t.Fatalf("sign in as %s: %v", key, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds.
func waitFor(t testing.TB, ctx context.Context, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")")); err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
	t.Fatalf("%s: %s did not hold within 45s; the page says:\n%s", what, cond, text)
}

var (
	amctlOnce sync.Once
	amctlPath string
	amctlErr  error
)

// amctl runs the command-line client (built once) against the stack.
func (d *dash) amctl(t *testing.T, key string, args ...string) string {
	t.Helper()
	amctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentmesh-ui-amctl")
		if err != nil {
			amctlErr = err
			return
		}
		amctlPath = filepath.Join(dir, "amctl")
		out, err := exec.Command("go", "build", "-o", amctlPath, "github.com/agentmesh/agentmesh/services/cmd/amctl").CombinedOutput()
		if err != nil {
			amctlErr = fmt.Errorf("build amctl: %v\n%s", err, out)
		}
	})
	if amctlErr != nil {
		t.Fatal(amctlErr)
	}
	cmd := exec.Command(amctlPath, args...)
	cmd.Env = append(os.Environ(), "AGENTMESH_SERVER="+d.grpc, "AGENTMESH_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("amctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// submit submits a task over the gRPC API as key.
func (d *dash) submit(t testing.TB, key string, req *agentmeshv1.SubmitTaskRequest) *agentmeshv1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), 20*time.Second)
	defer cancel()
	resp, err := agentmeshv1.NewTaskServiceClient(d.conn).SubmitTask(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return resp.GetTask()
}

// TestBrowser runs the dashboard's scenarios against one stack and one
// browser, each in a profile of its own.
func TestBrowser(t *testing.T) {
	d := startDash(t)
	t.Run("SignInRequired", func(t *testing.T) { browserSignInRequired(t, d) })
	t.Run("LiveSteps", func(t *testing.T) { browserLiveSteps(t, d) })
	t.Run("Approve", func(t *testing.T) { browserApprove(t, d) })
	t.Run("XSS", func(t *testing.T) { browserXSS(t, d) })
	t.Run("OtherOrg", func(t *testing.T) { browserOtherOrg(t, d) })
	t.Run("CSRF", func(t *testing.T) { browserCSRF(t, d) })
	t.Run("Pages", func(t *testing.T) { browserPages(t, d) })
	t.Run("Memory", func(t *testing.T) { browserMemory(t, d) })
}

// Without a session every page is the sign-in page and the API answers
// 401; a wrong key stays there, with no data; signing out ends it.
func browserSignInRequired(t *testing.T, d *dash) {
	ctx := d.tab(t)
	for _, p := range []string{"/ui/tasks", "/ui/approvals", "/ui/metrics"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(d.url+p), chromedp.WaitVisible(chromedp.CSS(`#key`))); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if u := eval[string](t, ctx, "location.pathname + location.search"); u != "/ui/signin?next="+strings.ReplaceAll(p, "/", "%2F") {
			t.Errorf("%s without a session went to %s, want the sign-in page", p, u)
		}
		if eval[bool](t, ctx, "!!document.querySelector('main table, meta[name=am-csrf]')") {
			t.Errorf("%s: the sign-in page shows data", p)
		}
	}
	api := eval[int](t, ctx, "fetch('/ui/api/v1/tasks').then(r => r.status)")
	if api != http.StatusUnauthorized {
		t.Errorf("the API without a session: %d, want 401", api)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#key`), "k-wrong"), chromedp.Submit(chromedp.CSS(`#key`)),
		chromedp.WaitVisible(chromedp.CSS(`.error`))); err != nil {
		t.Fatal(err)
	}
	if msg := eval[string](t, ctx, "document.querySelector('.error').textContent"); !strings.Contains(msg, "not valid") {
		t.Errorf("wrong key: %q", msg)
	}
	if eval[bool](t, ctx, "!!document.querySelector('table')") {
		t.Error("a wrong key shows data")
	}
	d.signIn(t, ctx, "k-acme")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`form[action="/ui/signout"] button`)), chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.Navigate(d.url+"/ui/tasks"), chromedp.WaitVisible(chromedp.CSS(`#key`))); err != nil {
		t.Fatalf("sign out: %v", err)
	}
}

// A task submitted from the CLI appears in the open list, and its steps
// appear on its page one after the other, without a reload.
func browserLiveSteps(t *testing.T, d *dash) {
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-acme")
	waitFor(t, ctx, "the list's stream", "document.querySelector('.live.is-live')")
	eval[bool](t, ctx, "window.__sameDocument = true")
	out := d.amctl(t, "k-acme", "submit", "--title", "watched live", "live: think in steps")
	fields := strings.Fields(out)
	if len(fields) < 2 || fields[0] != "task" {
		t.Fatalf("amctl submit said %q", out)
	}
	id := fields[1]
	waitFor(t, ctx, "the new task in the list", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')`, id))
	if !eval[bool](t, ctx, "window.__sameDocument === true") {
		t.Fatal("the list reloaded to show the task")
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id="%s"] a`, id))),
		chromedp.WaitVisible(chromedp.CSS(`ol.timeline`))); err != nil {
		t.Fatal(err)
	}
	eval[bool](t, ctx, "window.__sameDocument = true")
	waitFor(t, ctx, "the first model turn", "document.querySelectorAll('li.ev-step').length >= 1")
	first := eval[int](t, ctx, "document.querySelectorAll('li.ev-step').length")
	waitFor(t, ctx, "the task's end", "document.querySelector('#task-status .st-completed')")
	last := eval[int](t, ctx, "document.querySelectorAll('li.ev-step').length")
	if last <= first || last < 5 {
		t.Errorf("steps: %d when the first came, %d at the end; want them to arrive one by one (5: three turns, two calls... and results)", first, last)
	}
	if !eval[bool](t, ctx, "window.__sameDocument === true") {
		t.Error("the task page reloaded while the steps came")
	}
	if text := eval[string](t, ctx, "document.querySelector('ol.timeline').innerText"); !strings.Contains(text, "step two") || !strings.Contains(text, "live final answer") {
		t.Errorf("timeline:\n%s", text)
	}
}

// A tool call that needs a person: it is on the approvals page with its
// exact arguments; approving it there lets the task finish.
func browserApprove(t *testing.T, d *dash) {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-acme"), 20*time.Second)
	defer cancel()
	_, err := agentmeshv1.NewAgentServiceClient(d.conn).CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "careful", Tools: []string{"echo"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"echo": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL},
	}})
	if err != nil {
		t.Fatal(err)
	}
	task := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Agent: "careful", Title: "needs a yes", Input: "please echo 42"})
	tab := d.tab(t)
	d.signIn(t, tab, "k-acme")
	if err := chromedp.Do(tab, chromedp.Navigate(d.url+"/ui/approvals")); err != nil {
		t.Fatal(err)
	}
	card := fmt.Sprintf(`[data-approval^="%s-a"]`, task.Id)
	waitFor(t, tab, "the pending call", "document.querySelector('"+card+"')")
	args := eval[string](t, tab, "document.querySelector('"+card+" pre.exact').textContent")
	if !strings.Contains(args, `"text"`) || !strings.Contains(args, "please echo 42") {
		t.Errorf("exact arguments shown: %q", args)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(card+" button.approve"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the decision", "!document.querySelector('"+card+"')")
	if err := chromedp.Do(tab, chromedp.Navigate(d.url+"/ui/tasks/"+task.Id)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the approved task's end", "document.querySelector('#task-status .st-completed')")
	waitFor(t, tab, "the approval and the end in the timeline", "document.querySelector('ol.timeline li:last-child .st-completed') && document.querySelector('ol.timeline').innerText.includes('approved')")
}

// Markup in a task's title, input and tool result is shown as text: no
// element is made of it and no script runs.
func browserXSS(t *testing.T, d *dash) {
	payload := `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`
	task := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: `<b id="bold">t</b><img src=x onerror="window.__xss=3">`, Input: payload})
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-acme")
	waitFor(t, ctx, "the task in the list", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')`, task.Id))
	if err := chromedp.Do(ctx, chromedp.Navigate(d.url+"/ui/tasks/"+task.Id)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the task's end", "document.querySelector('#task-status .st-completed')")
	waitFor(t, ctx, "the tool result", "document.querySelectorAll('li.ev-step').length >= 3")
	if !strings.Contains(eval[string](t, ctx, "document.querySelector('h1').textContent"), `<b id="bold">`) {
		t.Error("the title is not shown as text")
	}
	if n := eval[int](t, ctx, "[...document.querySelectorAll('pre')].filter(p => p.textContent.includes('<script>window.__xss=2</script>')).length"); n < 2 {
		t.Errorf("the payload shows as text in %d blocks, want the input and the tool's result at least", n)
	}
	if eval[bool](t, ctx, "window.__xss !== undefined || !!document.querySelector('main img, main script, #bold')") {
		t.Error("the payload became markup or ran")
	}
}

// Another org's task by its id in the URL is not found, and none of it
// shows.
func browserOtherOrg(t *testing.T, d *dash) {
	task := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "acme secret plans", Input: "acme only"})
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-globex")
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(d.url+"/ui/tasks/"+task.Id))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusNotFound {
		t.Errorf("globex opening acme's task: HTTP %d, want 404", resp.Status)
	}
	waitFor(t, ctx, "the not-found page", "document.querySelector('h1') && document.querySelector('h1').textContent === 'Task not found'")
	if text := eval[string](t, ctx, "document.body.innerText"); strings.Contains(text, "acme secret plans") || strings.Contains(text, "acme only") {
		t.Errorf("globex sees acme's task:\n%s", text)
	}
	if st := eval[int](t, ctx, fmt.Sprintf("fetch('/ui/api/v1/tasks/%s').then(r => r.status)", task.Id)); st != http.StatusNotFound {
		t.Errorf("globex's API read of acme's task: %d, want 404", st)
	}
}

// A change without the session's CSRF token is refused, even from the
// dashboard's own page with its cookie; with it, it goes through.
func browserCSRF(t *testing.T, d *dash) {
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-acme")
	post := func(token string) int {
		return eval[int](t, ctx, fmt.Sprintf(`fetch('/ui/api/v1/tasks', {method: 'POST', headers: {'Content-Type': 'application/json'%s},
			body: JSON.stringify({input: 'csrf probe'})}).then(r => r.status)`, token))
	}
	if st := post(""); st != http.StatusForbidden {
		t.Errorf("POST without the token: %d, want 403", st)
	}
	if st := post(`, 'X-CSRF-Token': 'forged'`); st != http.StatusForbidden {
		t.Errorf("POST with a forged token: %d, want 403", st)
	}
	if st := post(`, 'X-CSRF-Token': document.querySelector('meta[name=am-csrf]').content`); st != http.StatusOK {
		t.Errorf("POST with the session's token: %d, want 200", st)
	}
	// A reader's change passes the dashboard's guards and is refused by
	// the API, as over REST.
	reader := d.tab(t)
	d.signIn(t, reader, "k-reader")
	st := eval[int](t, reader, `fetch('/ui/api/v1/tasks', {method: 'POST', headers: {'Content-Type': 'application/json',
		'X-CSRF-Token': document.querySelector('meta[name=am-csrf]').content}, body: JSON.stringify({input: 'x'})}).then(r => r.status)`)
	if st != http.StatusForbidden {
		t.Errorf("a reader submitting: %d, want 403 (the API's PermissionDenied)", st)
	}
}

// Every page draws without an error in the page.
func browserPages(t *testing.T, d *dash) {
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-acme")
	for _, p := range []struct{ path, ready string }{
		{"/ui/agents", "document.querySelector('main table a[href=\"/ui/agents/assistant\"]')"},
		{"/ui/agents/assistant", "document.querySelector('main h1').textContent === 'assistant'"},
		{"/ui/skills", "document.querySelector('main table')"},
		{"/ui/proposals", "document.querySelector('main .proposals p, main .proposals article')"},
		{"/ui/metrics", "document.querySelectorAll('figure.chart-box svg').length >= 6"},
		{"/ui/executors", "document.querySelector('article.node')"},
		{"/ui/memory", "document.querySelector('#sec-threads') && document.querySelector('#memories-status') && document.querySelector('#state-status')"},
	} {
		if err := chromedp.Do(ctx, chromedp.Navigate(d.url+p.path)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, p.path, p.ready)
	}
}

// A signed-in browser's connection counts as authenticated for the
// listener's connection cap (its requests carry a session, not a key): its
// event stream is not cut when the cap's deadline to authenticate passes.
func TestSessionConnectionStays(t *testing.T) {
	d := startStack(t, func(c *stack.Config) { c.Router.AuthTimeout = 500 * time.Millisecond })
	c := d.httpSession(t, "k-acme")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/ui/api/v1/tasks:watch", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("open the stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended after the auth deadline: %v", err)
	case <-time.After(2 * time.Second):
	}
}

// memoryScenarios are the default script's memory demo ("remember: …"
// calls remember, "recall: …" calls recall), put before the browser
// script's own scenarios.
func memoryScenarios(t testing.TB) []scriptedmodel.Scenario {
	t.Helper()
	var out []scriptedmodel.Scenario
	for _, sc := range scriptedmodel.DefaultScript().Scenarios {
		if strings.Contains(sc.Match, "remember:") || strings.Contains(sc.Match, "recall:") {
			out = append(out, sc)
		}
	}
	if len(out) != 2 {
		t.Fatalf("the default script's memory demo: %d scenarios, want remember and recall", len(out))
	}
	return out
}

// finished waits for a task to finish and returns it.
func (d *dash) finished(t testing.TB, key, id string) *agentmeshv1.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), 60*time.Second)
	defer cancel()
	tasks := agentmeshv1.NewTaskServiceClient(d.conn)
	for {
		resp, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		if resp.GetTask().GetFinishedAt() != nil {
			return resp.GetTask()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// memoryFixture is what browserMemory puts in acme's memory.
type memoryFixture struct {
	fact, xss *agentmeshv1.Task // the tasks that remembered a fact and markup
	thread    string
}

// seedMemory has an agent remember a fact and a text of markup (the
// scripted model's memory demo), runs a task in a thread and sets an org
// state value holding markup.
func (d *dash) seedMemory(t *testing.T) memoryFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-acme"), 20*time.Second)
	defer cancel()
	_, err := agentmeshv1.NewAgentServiceClient(d.conn).CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "notes", Tools: []string{"remember", "recall"}, Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"agent"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f := memoryFixture{thread: "chat-ui"}
	f.fact = d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Agent: "notes", Input: "remember: our deploy window is Tuesday 10:00 UTC"})
	f.xss = d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Agent: "notes",
		Input: `remember: <img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`})
	chat := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{ThreadId: f.thread, Title: "in a thread", Input: "hello thread"})
	for _, id := range []string{f.fact.Id, f.xss.Id, chat.Id} {
		if got := d.finished(t, "k-acme", id); got.GetStatus() != agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED {
			t.Fatalf("task %s (%s) ended %v: %s", id, got.GetInput(), got.GetStatus(), got.GetError())
		}
	}
	value, _ := structpb.NewValue(map[string]any{"html": `<script>window.__xss=4</script>`, "step": 3})
	if _, err := agentmeshv1.NewMemoryServiceClient(d.conn).SetState(ctx, &agentmeshv1.SetStateRequest{Scope: "org", Key: "plan.ui", Value: value}); err != nil {
		t.Fatal(err)
	}
	return f
}

// The memory page: a memory a task remembered is listed with its
// provenance; markup in a memory and in a state value is text; threads
// open to their tasks; an admin deletes a memory and an operator a thread
// from the page; a reader gets no delete button and the API refuses its
// delete; another org sees none of it.
func browserMemory(t *testing.T, d *dash) {
	f := d.seedMemory(t)
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-acme")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`header nav a[href="/ui/memory"]`))); err != nil {
		t.Fatal(err)
	}
	factRow := `[...document.querySelectorAll('tr[data-memory]')].find(r => r.innerText.includes('deploy window is Tuesday'))`
	waitFor(t, ctx, "the remembered fact", factRow)
	if text := eval[string](t, ctx, factRow+".innerText"); !strings.Contains(text, f.fact.Id) || !strings.Contains(text, "notes") || !strings.Contains(text, "agent") {
		t.Errorf("the fact's row does not name its task %s, agent notes and scope agent:\n%s", f.fact.Id, text)
	}
	xssRow := `[...document.querySelectorAll('tr[data-memory]')].find(r => r.querySelector('pre.memory-text').textContent.includes('<script>window.__xss=2</script>'))`
	waitFor(t, ctx, "the markup memory, as text", xssRow)
	waitFor(t, ctx, "the state value, as text", `document.querySelector('tr[data-key="plan.ui"] pre.state-value') && document.querySelector('tr[data-key="plan.ui"] pre.state-value').textContent.includes('<script>window.__xss=4</script>')`)
	if eval[bool](t, ctx, "window.__xss !== undefined || !!document.querySelector('main img, main script')") {
		t.Error("a memory's or a value's markup became markup or ran")
	}
	// A thread opens to its conversation.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-thread="%s"] button`, f.thread)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the thread's tasks", fmt.Sprintf(`document.querySelector('[data-thread-detail="%s"]') && document.querySelector('[data-thread-detail="%s"]').innerText.includes('hello thread')`, f.thread, f.thread))
	if !eval[bool](t, ctx, "document.activeElement && document.activeElement.id === 'thread-title'") {
		t.Error("opening a thread does not move the focus to it")
	}
	memoryFilters(t, ctx)
	d.memoryAsReader(t, f)
	d.memoryOtherOrg(t)
	// The admin deletes the markup memory, then the thread.
	eval[bool](t, ctx, "(window.confirm = () => true, true)")
	id := eval[string](t, ctx, xssRow+".dataset.memory")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-memory="%s"] button.danger`, id)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the memory gone from the list", fmt.Sprintf(`!document.querySelector('tr[data-memory="%s"]') && document.querySelector('#memories-status').textContent.includes('Deleted')`, id))
	if st := eval[int](t, ctx, fmt.Sprintf("fetch('/ui/api/v1/memories/%s').then(r => r.status)", id)); st != http.StatusNotFound {
		t.Errorf("the deleted memory: GET %d, want 404", st)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-thread-detail="%s"] button.danger`, f.thread)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the thread gone", fmt.Sprintf(`!document.querySelector('tr[data-thread="%s"]') && document.querySelector('#threads-status').textContent.includes('Deleted thread')`, f.thread))
}

// A reader sees the memory page without a delete button, and the API
// refuses its delete of a memory and of a thread.
func (d *dash) memoryAsReader(t *testing.T, f memoryFixture) {
	t.Helper()
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-reader")
	if err := chromedp.Do(ctx, chromedp.Navigate(d.url+"/ui/memory?thread="+f.thread)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the reader's memory list", `document.querySelectorAll('tr[data-memory]').length >= 2`)
	waitFor(t, ctx, "the reader's open thread", fmt.Sprintf(`document.querySelector('[data-thread-detail="%s"]')`, f.thread))
	if n := eval[int](t, ctx, "document.querySelectorAll('main button.danger').length"); n != 0 {
		t.Errorf("a reader sees %d delete buttons", n)
	}
	id := eval[string](t, ctx, "document.querySelector('tr[data-memory]').dataset.memory")
	del := func(path string) int {
		return eval[int](t, ctx, fmt.Sprintf(`fetch('/ui/api/v1/%s', {method: 'DELETE', headers: {'X-CSRF-Token': document.querySelector('meta[name=am-csrf]').content}}).then(r => r.status)`, path))
	}
	if st := del("memories/" + id); st != http.StatusForbidden {
		t.Errorf("a reader deleting memory %s: %d, want 403", id, st)
	}
	if st := del("threads/" + f.thread); st != http.StatusForbidden {
		t.Errorf("a reader deleting thread %s: %d, want 403", f.thread, st)
	}
	if st := eval[int](t, ctx, fmt.Sprintf("fetch('/ui/api/v1/memories/%s').then(r => r.status)", id)); st != http.StatusOK {
		t.Errorf("the memory after the reader's refused delete: GET %d, want 200", st)
	}
}

// Another org's memory page shows none of acme's memories, threads or
// state.
func (d *dash) memoryOtherOrg(t *testing.T) {
	t.Helper()
	ctx := d.tab(t)
	d.signIn(t, ctx, "k-globex")
	if err := chromedp.Do(ctx, chromedp.Navigate(d.url+"/ui/memory")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "globex's empty memory page", `document.querySelector('main').innerText.includes('No memories match') && document.querySelector('main').innerText.includes('No threads yet') && document.querySelector('main').innerText.includes('No keys in this scope')`)
}

// The memory page's filters: by scope and scope id (kept in the address),
// by a tag nothing carries, and working state of an agent scope that
// names no agent.
func memoryFilters(t *testing.T, ctx context.Context) {
	t.Helper()
	// filter sets the form's fields (id → value) and submits it as a
	// person pressing Enter in its last field does.
	filter := func(fields string) {
		t.Helper()
		eval[bool](t, ctx, `(() => { let last; for (const [id, v] of Object.entries(`+fields+`)) { last = document.getElementById(id); last.value = v; }
			last.form.requestSubmit(); return true; })()`)
	}
	filter(`{'m-scope': 'agent', 'm-scope-id': 'notes'}`)
	waitFor(t, ctx, "the agent scope's memories", `location.search.includes('m_scope=agent') && location.search.includes('m_scope_id=notes') && document.querySelectorAll('tr[data-memory]').length >= 2`)
	filter(`{'m-tag': 'none-such'}`)
	waitFor(t, ctx, "no memory with the tag", `!document.querySelector('tr[data-memory]') && document.querySelector('main').innerText.includes('No memories match')`)
	filter(`{'s-scope': 'agent', 's-prefix': ''}`)
	waitFor(t, ctx, "an agent scope without its name", `!document.querySelector('tr[data-key]') && document.querySelector('#state-status').textContent.includes('Name the agent')`)
	filter(`{'m-tag': ''}`)
	waitFor(t, ctx, "the memories again", `document.querySelectorAll('tr[data-memory]').length >= 2`)
}
