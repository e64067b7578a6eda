package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// versionServer answers GetVersion and records the key it was sent.
type versionServer struct {
	agentmeshv1.UnimplementedVersionServiceServer
	keys chan string
}

func (v *versionServer) GetVersion(ctx context.Context, _ *agentmeshv1.GetVersionRequest) (*agentmeshv1.GetVersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	select {
	case v.keys <- strings.Join(md.Get("authorization"), ","):
	default:
	}
	return &agentmeshv1.GetVersionResponse{Version: "v7.7.7", GoVersion: "go1.99"}, nil
}

// serveVersion runs a gRPC server with the version service on loopback.
func serveVersion(t *testing.T) (string, chan string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	v := &versionServer{keys: make(chan string, 16)}
	agentmeshv1.RegisterVersionServiceServer(g, v)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), v.keys
}

// runAmctl runs the CLI with exactly these arguments.
func runAmctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	addr, _ := serveVersion(t)
	code, out, errOut := amctl(t, addr, "version")
	if code != 0 || !strings.Contains(out, "client: amctl ") || !strings.Contains(out, "server: agentmesh v7.7.7 (go1.99) at "+addr) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = amctl(t, addr, "version", "-o", "json")
	var v map[string]versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v["server"].Version != "v7.7.7" || v["client"].Version == "" {
		t.Fatalf("json: exit %d %s %v", code, out, err)
	}
	// --client connects nowhere; an unreachable server is an error after
	// the client's line.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := lis.Addr().String()
	lis.Close()
	if code, out, _ := amctl(t, dead, "version", "--client"); code != 0 || strings.Contains(out, "server") {
		t.Fatalf("--client: exit %d %s", code, out)
	}
	code, out, errOut = amctl(t, dead, "version")
	if code != 1 || !strings.HasPrefix(out, "client: amctl ") || !strings.Contains(errOut, "cannot reach agentmesh") {
		t.Fatalf("unreachable: exit %d %q %q", code, out, errOut)
	}
}

// writeConfig writes a profiles file and points AGENTMESH_CONFIG at it.
func writeConfig(t *testing.T, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envConfig, p)
	return p
}

// A context gives the server and the key; --context and AGENTMESH_CONTEXT
// choose it; flags and the environment still win.
func TestProfiles(t *testing.T) {
	addrA, keysA := serveVersion(t)
	addrB, keysB := serveVersion(t)
	writeConfig(t, `current_context: a
contexts:
  a:
    server: `+addrA+`
    api_key: key-a
  b:
    server: `+addrB+`
    api_key: key-b
`, 0o600)
	t.Setenv(envServer, "")
	t.Setenv(envAPIKey, "")
	t.Setenv(envContext, "")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		keys    chan string
		wantKey string
	}{
		{"current context", nil, []string{"version"}, keysA, "Bearer key-a"},
		{"--context", nil, []string{"--context", "b", "version"}, keysB, "Bearer key-b"},
		{"--context after the command", nil, []string{"version", "--context", "b"}, keysB, "Bearer key-b"},
		{"AGENTMESH_CONTEXT", map[string]string{envContext: "b"}, []string{"version"}, keysB, "Bearer key-b"},
		{"--api-key wins", nil, []string{"--context", "b", "--api-key", "mine", "version"}, keysB, "Bearer mine"},
		{"AGENTMESH_API_KEY wins", map[string]string{envAPIKey: "from-env"}, []string{"--context", "b", "version"}, keysB, "Bearer from-env"},
		{"--server wins", nil, []string{"--context", "b", "--server", addrA, "version"}, keysA, "Bearer key-b"},
		{"AGENTMESH_SERVER wins", map[string]string{envServer: addrA}, []string{"version"}, keysA, "Bearer key-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errOut := runAmctl(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d %s %s", code, out, errOut)
			}
			select {
			case got := <-tc.keys:
				if got != tc.wantKey {
					t.Errorf("key %q, want %q", got, tc.wantKey)
				}
			default:
				t.Fatalf("the expected server was not called: %s", out)
			}
		})
	}
	t.Run("unknown context", func(t *testing.T) {
		code, _, errOut := runAmctl(t, "--context", "nope", "version")
		if code != 2 || !strings.Contains(errOut, `no context "nope"`) || !strings.Contains(errOut, "contexts: a, b") {
			t.Fatalf("exit %d %q", code, errOut)
		}
	})
	t.Run("contexts", func(t *testing.T) {
		code, out, _ := runAmctl(t, "--context", "b", "contexts")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || !regexp.MustCompile(`^\*\s+b\s+`+regexp.QuoteMeta(addrB)+`\s+false\s+set$`).MatchString(lines[2]) {
			t.Fatalf("exit %d\n%s", code, out)
		}
		if code, out, _ := runAmctl(t, "contexts", "--names"); code != 0 || out != "a\nb\n" {
			t.Fatalf("--names: %d %q", code, out)
		}
	})
}

// TLS files of a context are read relative to the config file; a file
// that others may read and that holds a key is warned about; a bad file
// is an error naming it.
func TestProfileFiles(t *testing.T) {
	p := writeConfig(t, "contexts:\n  x:\n    server: 127.0.0.1:1\n    api_key: k\n    ca: certs/ca.pem\n    cert_key: ~/me-key.pem\n", 0o644)
	c := &cli{stderr: &bytes.Buffer{}, context: "x"}
	if err := c.applyContext(); err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	if c.caFile != filepath.Join(filepath.Dir(p), "certs", "ca.pem") || c.keyFile != filepath.Join(home, "me-key.pem") {
		t.Errorf("ca %q key %q", c.caFile, c.keyFile)
	}
	if !strings.Contains(c.stderr.(*bytes.Buffer).String(), "readable by others") {
		t.Errorf("no warning about a world-readable key file: %q", c.stderr)
	}
	writeConfig(t, "contexts:\n  x:\n    sever: typo\n", 0o600)
	if code, _, errOut := runAmctl(t, "--context", "x", "version"); code != 1 || !strings.Contains(errOut, "config.yaml") || !strings.Contains(errOut, "sever") {
		t.Fatalf("bad file: exit %d %q", code, errOut)
	}
}

// The completion scripts: bash really completes commands, a group's
// commands and a command's flags; zsh is the bash one; fish lists them.
func TestCompletion(t *testing.T) {
	code, script, errOut := runAmctl(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errOut)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	complete := func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n_amctl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		got := strings.Fields(string(out))
		sort.Strings(got)
		return got
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"amctl", "ag"}, "[agents]"},
		{[]string{"amctl", "agents", "cr"}, "[create]"},
		{[]string{"amctl", "--server", "x:1", "agents", "create", "--sys"}, "[--system-prompt]"},
		{[]string{"amctl", "submit", "--ag"}, "[--agent]"},
		{[]string{"amctl", "list", "-o", "j"}, "[json]"},
		{[]string{"amctl", "completion", "f"}, "[fish]"},
		{[]string{"amctl", "--con"}, "[--context]"},
	} {
		if got := complete(tc.words...); strings.Join(got, " ") != strings.Trim(tc.want, "[]") {
			t.Errorf("complete %v: %v, want %s", tc.words, got, tc.want)
		}
	}
	_, zsh, _ := runAmctl(t, "completion", "zsh")
	if !strings.HasPrefix(zsh, "#compdef amctl") || !strings.Contains(zsh, "bashcompinit") || !strings.Contains(zsh, "complete -o default -F _amctl amctl") {
		t.Errorf("zsh script:\n%s", zsh)
	}
	_, fish, _ := runAmctl(t, "completion", "fish")
	for _, want := range []string{"-a submit -d 'submit a task", "__fish_seen_subcommand_from agents; and __fish_seen_subcommand_from create' -l system-prompt", "-s o -x -a 'table json'"} {
		if !strings.Contains(fish, want) {
			t.Errorf("fish script lacks %q", want)
		}
	}
	if code, _, errOut := runAmctl(t, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, "want bash, zsh, fish") {
		t.Errorf("tcsh: %d %q", code, errOut)
	}
}

// groupCommands names exactly the commands each group runs (the group's
// own refusal of an unknown command lists them).
func TestGroupCommandsComplete(t *testing.T) {
	want := regexp.MustCompile(`\(want ([^)]*)\)`)
	for group, subs := range groupCommands {
		_, _, errOut := runAmctl(t, group, "no-such-command")
		m := want.FindStringSubmatch(errOut)
		if group == "taps" {
			if !strings.Contains(errOut, "taps create") {
				t.Errorf("taps: %q", errOut)
			}
			continue
		}
		if m == nil {
			t.Fatalf("%s: %q", group, errOut)
		}
		listed := strings.Split(strings.ReplaceAll(m[1], " or ", ", "), ", ")
		if strings.Join(listed, " ") != strings.Join(subs, " ") {
			t.Errorf("%s runs %v; groupCommands lists %v", group, listed, subs)
		}
	}
}
