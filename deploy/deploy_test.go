// Package deploy holds the deployment files of agentmesh (docker-compose.yml
// at the repository root, deploy/nats, deploy/k8s) and the tests that keep
// them, the Dockerfile, the Makefile and .ci/run true to the binary's
// contract: the subcommands of app.Commands() and the variables of
// app.EnvVars(). No Docker engine or cluster is needed: the files are parsed
// and checked, not run.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentmesh/agentmesh/services/app"
)

const (
	repoRoot      = ".."
	k8sDir        = "k8s"
	namespace     = "agentmesh"
	image         = "agentmesh:dev" // the one image of every agentmesh container
	natsClientURL = "nats://nats:4222"
)

// ---------------------------------------------------------------------------
// The binary's contract
// ---------------------------------------------------------------------------

func envVars() map[string]app.Env {
	m := make(map[string]app.Env)
	for _, e := range app.EnvVars() {
		m[e.Name] = e
	}
	return m
}

// reads reports whether subcommand cmd reads variable name.
func reads(name, cmd string) bool {
	e, ok := envVars()[name]
	if !ok {
		return false
	}
	return slices.Contains(e.Commands, "*") || slices.Contains(e.Commands, cmd)
}

// checkEnv checks the variables set on one agentmesh container running cmd:
// each is a variable of app.EnvVars() that cmd reads.
func checkEnv(t *testing.T, where, cmd string, names []string) {
	t.Helper()
	all := envVars()
	for _, n := range names {
		if _, ok := all[n]; !ok {
			t.Errorf("%s: environment variable %s is not in app.EnvVars()", where, n)
			continue
		}
		if !reads(n, cmd) {
			t.Errorf("%s: %s is set but `agentmesh %s` does not read it (app.EnvVars says: %v)", where, n, cmd, all[n].Commands)
		}
	}
}

func checkCommand(t *testing.T, where string, args []string) string {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no subcommand: the image's entrypoint is `agentmesh` and needs one", where)
		return ""
	}
	if !slices.Contains(app.Commands(), args[0]) {
		t.Errorf("%s: subcommand %q is not one of app.Commands() %v", where, args[0], app.Commands())
	}
	return args[0]
}

// ---------------------------------------------------------------------------
// YAML helpers (generic trees: map[string]any, []any, scalars)
// ---------------------------------------------------------------------------

func readYAMLDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs
}

// get walks a path of map keys and list indexes (ints).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	x := get(v, path...)
	if x == nil {
		return ""
	}
	return fmt.Sprint(x)
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func mapping(v any, path ...any) map[string]any {
	m, _ := get(v, path...).(map[string]any)
	return m
}

func strings_(l []any) []string {
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = fmt.Sprint(x)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func hostPort(t *testing.T, where, rawURL string) (host, port string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		t.Errorf("%s: %q is not a URL with a host", where, rawURL)
		return "", ""
	}
	return u.Hostname(), u.Port()
}

func listenPort(t *testing.T, where, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: listen address %q: %v", where, addr, err)
		return ""
	}
	if host == "127.0.0.1" || host == "localhost" || host == "::1" {
		t.Errorf("%s: listen address %q is loopback: nothing outside the container reaches it", where, addr)
	}
	return port
}

// ---------------------------------------------------------------------------
// docker-compose.yml
// ---------------------------------------------------------------------------

type composeService struct {
	name    string
	image   string
	build   bool
	command []string
	env     map[string]string
	ports   []string
	deps    []string
	raw     map[string]any
}

func (s composeService) agentmesh() bool { return s.build || strings.HasPrefix(s.image, "agentmesh") }

func (s composeService) replicas() int {
	if r, ok := get(s.raw, "deploy", "replicas").(int); ok {
		return r
	}
	return 1
}

func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	docs := readYAMLDocs(t, filepath.Join(repoRoot, "docker-compose.yml"))
	if len(docs) != 1 {
		t.Fatalf("docker-compose.yml: %d YAML documents, want 1", len(docs))
	}
	services := mapping(docs[0], "services")
	if len(services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	out := make(map[string]composeService)
	for name, v := range services {
		raw, _ := v.(map[string]any)
		s := composeService{name: name, raw: raw, image: str(raw, "image"), build: get(raw, "build") != nil, env: map[string]string{}}
		switch c := get(raw, "command").(type) {
		case []any:
			s.command = strings_(c)
		case string:
			s.command = strings.Fields(c)
		}
		switch e := get(raw, "environment").(type) {
		case map[string]any:
			for k, v := range e {
				if v == nil {
					v = ""
				}
				s.env[k] = fmt.Sprint(v)
			}
		case []any:
			for _, kv := range strings_(e) {
				k, v, _ := strings.Cut(kv, "=")
				s.env[k] = v
			}
		}
		s.ports = strings_(list(raw, "ports"))
		switch d := get(raw, "depends_on").(type) {
		case map[string]any:
			s.deps = sortedKeys(d)
		case []any:
			s.deps = strings_(d)
		}
		out[name] = s
	}
	return out
}

func published(ports []string, port string) bool {
	for _, p := range ports {
		// "7400:7400", "127.0.0.1:7400:7400", "7400:7400/tcp"
		parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
		if len(parts) >= 2 && parts[len(parts)-1] == port {
			return true
		}
	}
	return false
}

func TestComposeServices(t *testing.T) {
	services := loadCompose(t)

	byCommand := map[string][]composeService{}
	for _, name := range sortedKeys(services) {
		s := services[name]
		for _, d := range s.deps {
			if _, ok := services[d]; !ok {
				t.Errorf("compose %s: depends_on unknown service %q", name, d)
			}
		}
		if !s.agentmesh() {
			continue
		}
		where := "compose " + name
		if s.image != image {
			t.Errorf("%s: image %q, want the one agentmesh image %q", where, s.image, image)
		}
		cmd := checkCommand(t, where, s.command)
		byCommand[cmd] = append(byCommand[cmd], s)
		checkEnv(t, where, cmd, sortedKeys(s.env))

		if reads("AGENTMESH_NATS_URL", cmd) {
			checkComposeNATSURL(t, where, s, services)
		}
	}

	for _, cmd := range []string{"state", "registry", "scheduler", "executor", "router", "scripted-model"} {
		if len(byCommand[cmd]) == 0 {
			t.Errorf("compose: no service runs `agentmesh %s`", cmd)
		}
	}

	// state: a Postgres URL that points at the postgres service with its credentials.
	for _, s := range byCommand["state"] {
		u, ok := s.env["AGENTMESH_POSTGRES_URL"]
		if !ok || u == "" {
			t.Errorf("compose %s: AGENTMESH_POSTGRES_URL is not set (state would use the embedded store)", s.name)
			continue
		}
		pu, err := url.Parse(u)
		if err != nil {
			t.Errorf("compose %s: AGENTMESH_POSTGRES_URL %q: %v", s.name, u, err)
			continue
		}
		pg, ok := services[pu.Hostname()]
		if !ok || !strings.HasPrefix(pg.image, "postgres:15") {
			t.Errorf("compose %s: AGENTMESH_POSTGRES_URL host %q is not a postgres:15 service", s.name, pu.Hostname())
			continue
		}
		pass, _ := pu.User.Password()
		if pu.User.Username() != pg.env["POSTGRES_USER"] || pass != pg.env["POSTGRES_PASSWORD"] ||
			strings.TrimPrefix(pu.Path, "/") != pg.env["POSTGRES_DB"] {
			t.Errorf("compose %s: AGENTMESH_POSTGRES_URL %q does not match the postgres service's POSTGRES_USER/PASSWORD/DB", s.name, u)
		}
		if get(pg.raw, "healthcheck", "test") == nil {
			t.Errorf("compose %s: no healthcheck", pg.name)
		}
		if str(s.raw, "depends_on", pg.name, "condition") != "service_healthy" {
			t.Errorf("compose %s: does not wait for %s to be healthy", s.name, pg.name)
		}
	}

	// router: the gRPC API on 7400, published.
	for _, s := range byCommand["router"] {
		port := "7400"
		if l, ok := s.env["AGENTMESH_LISTEN"]; ok {
			port = listenPort(t, "compose "+s.name, l)
		} else {
			t.Errorf("compose %s: AGENTMESH_LISTEN is not set; the default listens on loopback only", s.name)
		}
		if port != "7400" || !published(s.ports, "7400") {
			t.Errorf("compose %s: the gRPC API port 7400 is not published (listen port %q, ports %v)", s.name, port, s.ports)
		}
	}

	// scripted model on 7401, and the executors pointed at it.
	modelPort := map[string]string{}
	for _, s := range byCommand["scripted-model"] {
		port := listenPort(t, "compose "+s.name, s.env["AGENTMESH_SCRIPTED_LISTEN"])
		if port != "7401" || !published(s.ports, "7401") {
			t.Errorf("compose %s: the scripted model's port 7401 is not published (listen port %q, ports %v)", s.name, port, s.ports)
		}
		modelPort[s.name] = port
	}
	executors := 0
	for _, s := range byCommand["executor"] {
		executors += s.replicas()
		u := s.env["AGENTMESH_MODEL_BASE_URL"]
		host, port := hostPort(t, "compose "+s.name, u)
		if p, ok := modelPort[host]; !ok || p != port {
			t.Errorf("compose %s: AGENTMESH_MODEL_BASE_URL %q does not point at the scripted-model service", s.name, u)
		}
	}
	if executors < 2 {
		t.Errorf("compose: %d executor replicas, want 2", executors)
	}
}

// checkComposeNATSURL checks a container's AGENTMESH_NATS_URL: every URL of
// the list is a NATS service of the file on 4222 that the container waits
// for, and a list of several (a cluster) leaves the streams' replicas at 3
// or more (issue 26: clusters by default).
func checkComposeNATSURL(t *testing.T, where string, s composeService, services map[string]composeService) {
	t.Helper()
	v, ok := s.env["AGENTMESH_NATS_URL"]
	if !ok {
		t.Errorf("%s: `agentmesh %s` needs NATS but AGENTMESH_NATS_URL is not set", where, s.command[0])
		return
	}
	urls := strings.Split(v, ",")
	for _, u := range urls {
		host, port := hostPort(t, where, strings.TrimSpace(u))
		nats, ok := services[host]
		if !ok || !strings.HasPrefix(nats.image, "nats") {
			t.Errorf("%s: AGENTMESH_NATS_URL %q: %q is not a nats service", where, v, host)
		}
		if port != "4222" {
			t.Errorf("%s: AGENTMESH_NATS_URL %q: port %q, want 4222", where, u, port)
		}
		if !slices.Contains(s.deps, host) {
			t.Errorf("%s: does not depend_on %s", where, host)
		}
	}
	if n := len(natsServices(services)); len(urls) != n {
		t.Errorf("%s: AGENTMESH_NATS_URL lists %d servers, the file runs %d: list them all", where, len(urls), n)
	}
	if r, ok := s.env["AGENTMESH_STREAM_REPLICAS"]; ok && len(urls) > 1 && r != "3" {
		t.Errorf("%s: AGENTMESH_STREAM_REPLICAS %q on a cluster of %d: want it unset (3 by default) or 3", where, r, len(urls))
	}
}

// natsServices are the NATS servers of the compose file.
func natsServices(services map[string]composeService) []composeService {
	var out []composeService
	for _, name := range sortedKeys(services) {
		if strings.HasPrefix(services[name].image, "nats:") {
			out = append(out, services[name])
		}
	}
	return out
}

// The compose file runs a NATS cluster of three by default, each server
// with its own data and the shared config, which routes to all of them.
func TestComposeNATSJetStream(t *testing.T) {
	services := loadCompose(t)
	servers := natsServices(services)
	if len(servers) != 3 {
		t.Fatalf("compose: %d NATS servers, want a cluster of 3", len(servers))
	}
	b, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	checkJetStreamConf(t, "deploy/nats/nats.conf", conf)
	names, data := map[string]bool{}, map[string]bool{}
	for _, nats := range servers {
		where := "compose " + nats.name
		// --config PATH, and PATH mounted from deploy/nats/nats.conf.
		i := slices.Index(nats.command, "--config")
		if i < 0 || i+1 >= len(nats.command) {
			t.Fatalf("%s: command %v has no --config", where, nats.command)
		}
		path := nats.command[i+1]
		mounted := false
		for _, v := range strings_(list(nats.raw, "volumes")) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && filepath.Clean(parts[0]) == "deploy/nats/nats.conf" && parts[1] == path {
				mounted = true
			}
			if len(parts) >= 2 && parts[1] == "/data" {
				if data[parts[0]] {
					t.Errorf("%s: data volume %s is another server's too", where, parts[0])
				}
				data[parts[0]] = true
			}
		}
		if !mounted {
			t.Errorf("%s: ./deploy/nats/nats.conf is not mounted at %s", where, path)
		}
		name := nats.env["SERVER_NAME"]
		if name == "" || names[name] {
			t.Errorf("%s: SERVER_NAME %q: each server needs a name of its own (server_name: $SERVER_NAME)", where, name)
		}
		names[name] = true
		if !strings.Contains(conf, "nats://"+nats.name+":6222") {
			t.Errorf("deploy/nats/nats.conf: no cluster route to %s", nats.name)
		}
	}
	if len(data) != len(servers) {
		t.Errorf("compose: %d data volumes for %d NATS servers", len(data), len(servers))
	}
}

// checkJetStreamConf checks a nats-server config: JetStream on, fsync on every write.
func checkJetStreamConf(t *testing.T, where, conf string) {
	t.Helper()
	js := regexp.MustCompile(`(?s)jetstream\s*[:=]?\s*\{([^}]*)\}`).FindStringSubmatch(conf)
	if js == nil {
		t.Errorf("%s: no jetstream { ... } block", where)
		return
	}
	if !regexp.MustCompile(`(?m)^\s*sync_interval\s*[:=]\s*always\s*$`).MatchString(js[1]) {
		t.Errorf("%s: the jetstream block lacks `sync_interval: always`", where)
	}
	if !regexp.MustCompile(`(?m)^\s*store_dir\s*[:=]`).MatchString(js[1]) {
		t.Errorf("%s: the jetstream block has no store_dir", where)
	}
}

// TestComposeConfig asks the docker compose client plugin to validate the file
// (it needs no engine). It is an extra: the tests above are the validation.
func TestComposeConfig(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker client on this machine")
	}
	if err := exec.Command("docker", "compose", "version").Run(); err != nil {
		t.Skip("the docker compose client plugin is not installed (`docker compose version` failed)")
	}
	cmd := exec.Command("docker", "compose", "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = repoRoot
	// The router's keys are a required variable: compose refuses the file without them.
	cmd.Env = append(os.Environ(), "AGENTMESH_API_KEYS=ci-key=default")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("docker compose config -q: %v\n%s", err, out)
	}
}

// ---------------------------------------------------------------------------
// deploy/k8s
// ---------------------------------------------------------------------------

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc, "kind") }
func (o k8sObject) name() string { return str(o.doc, "metadata", "name") }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s %s/%s", o.file, o.kind(), o.name())
}

func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(k8sDir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if base := filepath.Base(f); base != "kustomization.yaml" && base != "kustomization.yml" {
				files = append(files, base)
			}
		}
	}
	sort.Strings(files)
	return files
}

func loadK8s(t *testing.T) []k8sObject {
	t.Helper()
	var objs []k8sObject
	for _, f := range manifestFiles(t) {
		docs := readYAMLDocs(t, filepath.Join(k8sDir, f))
		if len(docs) == 0 {
			t.Errorf("%s: no objects", f)
		}
		for _, d := range docs {
			objs = append(objs, k8sObject{file: f, doc: d})
		}
	}
	if len(objs) == 0 {
		t.Fatal("deploy/k8s: no objects")
	}
	return objs
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	docs := readYAMLDocs(t, filepath.Join(k8sDir, "kustomization.yaml"))
	if len(docs) != 1 {
		t.Fatalf("kustomization.yaml: %d documents, want 1", len(docs))
	}
	k := docs[0]
	if str(k, "kind") != "Kustomization" {
		t.Errorf("kustomization.yaml: kind %q, want Kustomization", str(k, "kind"))
	}
	if str(k, "namespace") != namespace {
		t.Errorf("kustomization.yaml: namespace %q, want %q", str(k, "namespace"), namespace)
	}
	listed := strings_(list(k, "resources"))
	seen := map[string]bool{}
	for _, r := range listed {
		if seen[r] {
			t.Errorf("kustomization.yaml: %s listed twice", r)
		}
		seen[r] = true
	}
	files := manifestFiles(t)
	for _, f := range files {
		if !seen[f] {
			t.Errorf("kustomization.yaml: resources do not list %s", f)
		}
	}
	for _, r := range listed {
		if !slices.Contains(files, r) {
			t.Errorf("kustomization.yaml: lists %s, which is not a manifest in deploy/k8s", r)
		}
	}
}

func TestK8sObjectsWellFormed(t *testing.T) {
	objs := loadK8s(t)
	names := map[string]bool{}
	hasNamespace := false
	for _, o := range objs {
		if str(o.doc, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: needs apiVersion, kind and metadata.name", o)
			continue
		}
		key := o.kind() + "/" + o.name()
		if names[key] {
			t.Errorf("%s: declared twice", o)
		}
		names[key] = true
		if o.kind() == "Namespace" {
			if o.name() == namespace {
				hasNamespace = true
			}
			continue
		}
		if ns := str(o.doc, "metadata", "namespace"); ns != namespace {
			t.Errorf("%s: metadata.namespace %q, want %q", o, ns, namespace)
		}
	}
	if !hasNamespace {
		t.Errorf("deploy/k8s: no Namespace %q", namespace)
	}
}

// podSpecs returns the pod template of each workload.
func workloads(objs []k8sObject) []k8sObject {
	var out []k8sObject
	for _, o := range objs {
		switch o.kind() {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			out = append(out, o)
		}
	}
	return out
}

func matches(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if fmt.Sprint(labels[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

func TestK8sWorkloads(t *testing.T) {
	objs := loadK8s(t)
	ws := workloads(objs)
	if len(ws) == 0 {
		t.Fatal("deploy/k8s: no workloads")
	}
	for _, w := range ws {
		sel := mapping(w.doc, "spec", "selector", "matchLabels")
		labels := mapping(w.doc, "spec", "template", "metadata", "labels")
		if !matches(sel, labels) {
			t.Errorf("%s: selector %v does not match the pod labels %v", w, sel, labels)
		}
		pod := mapping(w.doc, "spec", "template", "spec")
		if w.name() == "executor" {
			// The sandbox supervisor: privileged, and never configured to
			// run agents unsandboxed.
			c := mapping(list(pod, "containers"), 0)
			if get(c, "securityContext", "privileged") != true {
				t.Errorf("%s: the executor must be privileged to sandbox agents (namespaces, cgroups)", w)
			}
			for _, e := range list(c, "env") {
				if str(e, "name") == "AGENTMESH_ISOLATION" && str(e, "value") == "none" {
					t.Errorf("%s: AGENTMESH_ISOLATION=none runs agents unsandboxed", w)
				}
			}
			continue
		}
		if get(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", w)
		}
		containers := list(pod, "containers")
		if len(containers) == 0 {
			t.Errorf("%s: no containers", w)
		}
		for i := range containers {
			c := mapping(containers, i)
			where := fmt.Sprintf("%s container %s", w, str(c, "name"))
			for _, r := range []string{"requests", "limits"} {
				for _, res := range []string{"cpu", "memory"} {
					if str(c, "resources", r, res) == "" {
						t.Errorf("%s: no resources.%s.%s", where, r, res)
					}
				}
			}
			if get(c, "securityContext", "allowPrivilegeEscalation") != false {
				t.Errorf("%s: securityContext.allowPrivilegeEscalation is not false", where)
			}
			if !slices.Contains(strings_(list(c, "securityContext", "capabilities", "drop")), "ALL") {
				t.Errorf("%s: securityContext.capabilities.drop lacks ALL", where)
			}
		}
	}

	// Every Service and PodDisruptionBudget selects some workload's pods.
	for _, o := range objs {
		var sel map[string]any
		switch o.kind() {
		case "Service":
			sel = mapping(o.doc, "spec", "selector")
		case "PodDisruptionBudget":
			sel = mapping(o.doc, "spec", "selector", "matchLabels")
		default:
			continue
		}
		found := false
		for _, w := range ws {
			if matches(sel, mapping(w.doc, "spec", "template", "metadata", "labels")) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: selector %v matches no workload's pods", o, sel)
		}
	}
}

// findService returns the Service called name, and the workload its selector picks.
func findService(objs []k8sObject, name string) (svc, workload *k8sObject) {
	for i := range objs {
		if objs[i].kind() == "Service" && objs[i].name() == name {
			svc = &objs[i]
		}
	}
	if svc == nil {
		return nil, nil
	}
	for _, w := range workloads(objs) {
		if matches(mapping(svc.doc, "spec", "selector"), mapping(w.doc, "spec", "template", "metadata", "labels")) {
			w := w
			return svc, &w
		}
	}
	return svc, nil
}

func servicePort(svc *k8sObject, port int) map[string]any {
	for _, p := range list(svc.doc, "spec", "ports") {
		if get(p, "port") == port {
			return p.(map[string]any)
		}
	}
	return nil
}

func TestK8sAgentmeshContainers(t *testing.T) {
	objs := loadK8s(t)

	secrets := map[string]map[string]any{}
	for _, o := range objs {
		if o.kind() == "Secret" {
			data := mapping(o.doc, "stringData")
			if data == nil {
				data = mapping(o.doc, "data")
			}
			secrets[o.name()] = data
		}
	}

	byCommand := map[string][]k8sObject{}
	for _, w := range workloads(objs) {
		for _, c := range list(w.doc, "spec", "template", "spec", "containers") {
			img := str(c, "image")
			if !strings.HasPrefix(img, "agentmesh") {
				continue
			}
			where := fmt.Sprintf("%s container %s", w, str(c, "name"))
			if img != image {
				t.Errorf("%s: image %q, want the one agentmesh image %q", where, img, image)
			}
			args := strings_(list(c, "args"))
			if command := strings_(list(c, "command")); len(command) > 0 {
				if command[0] != "agentmesh" {
					t.Errorf("%s: command %v overrides the agentmesh entrypoint", where, command)
				}
				args = append(command[1:], args...)
			}
			cmd := checkCommand(t, where, args)
			if cmd == "" {
				continue
			}
			byCommand[cmd] = append(byCommand[cmd], w)

			env := map[string]map[string]any{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = e.(map[string]any)
			}
			if len(list(c, "envFrom")) > 0 {
				t.Errorf("%s: envFrom hides which variables a service gets; list them in env", where)
			}
			checkEnv(t, where, cmd, sortedKeys(env))
			for n, e := range env {
				if ref := mapping(e, "valueFrom", "secretKeyRef"); ref != nil {
					data, ok := secrets[str(ref, "name")]
					if !ok {
						t.Errorf("%s: %s refers to Secret %q, not declared in deploy/k8s", where, n, str(ref, "name"))
					} else if _, ok := data[str(ref, "key")]; !ok {
						t.Errorf("%s: %s refers to key %q, not in Secret %q", where, n, str(ref, "key"), str(ref, "name"))
					}
				}
			}
			value := func(n string) string { return str(env[n], "value") }

			if reads("AGENTMESH_NATS_URL", cmd) {
				if value("AGENTMESH_NATS_URL") != natsClientURL {
					t.Errorf("%s: AGENTMESH_NATS_URL %q, want %q", where, value("AGENTMESH_NATS_URL"), natsClientURL)
				}
			}
			if value("AGENTMESH_STREAM_REPLICAS") != "3" {
				t.Errorf("%s: AGENTMESH_STREAM_REPLICAS %q, want \"3\" (R3 streams on the 3-node NATS cluster)", where, value("AGENTMESH_STREAM_REPLICAS"))
			}
			switch cmd {
			case "state":
				if _, ok := env["AGENTMESH_POSTGRES_URL"]; !ok {
					t.Errorf("%s: no AGENTMESH_POSTGRES_URL", where)
				}
			case "executor":
				if value("AGENTMESH_CAPACITY") == "" {
					t.Errorf("%s: no AGENTMESH_CAPACITY", where)
				}
				if _, ok := env["AGENTMESH_MODEL_BASE_URL"]; !ok {
					t.Errorf("%s: no AGENTMESH_MODEL_BASE_URL", where)
				}
			case "router":
				if port := listenPort(t, where, value("AGENTMESH_LISTEN")); port != "7400" {
					t.Errorf("%s: AGENTMESH_LISTEN %q, want port 7400", where, value("AGENTMESH_LISTEN"))
				}
				if get(c, "readinessProbe", "grpc", "port") != 7400 {
					t.Errorf("%s: readinessProbe is not the gRPC health probe on 7400", where)
				}
				exposed := false
				for _, p := range list(c, "ports") {
					if get(p, "containerPort") == 7400 {
						exposed = true
					}
				}
				if !exposed {
					t.Errorf("%s: containerPort 7400 not declared", where)
				}
			}
		}
	}
	for _, cmd := range []string{"state", "registry", "scheduler", "executor", "router"} {
		if len(byCommand[cmd]) != 1 || byCommand[cmd][0].kind() != "Deployment" {
			t.Errorf("deploy/k8s: want one Deployment running `agentmesh %s`, got %v", cmd, byCommand[cmd])
		}
	}

	// The router's Service serves 7400 and selects the router's pods.
	svc, w := findService(objs, "router")
	if svc == nil || w == nil || len(byCommand["router"]) == 0 || w.String() != byCommand["router"][0].String() {
		t.Errorf("deploy/k8s: no Service `router` selecting the router Deployment")
	} else if servicePort(svc, 7400) == nil {
		t.Errorf("%s: no port 7400", svc)
	}

	// Secrets hold placeholders only, clearly marked. Those read as
	// environment variables hold variables of app.EnvVars(); those mounted
	// as files (the bus credentials) are checked by TestK8sBusLocked.
	mounted := secretVolumes(objs)
	for name, data := range secrets {
		for k, v := range data {
			if !strings.Contains(fmt.Sprint(v), "CHANGE_ME") {
				t.Errorf("Secret %s: %s is not a CHANGE_ME placeholder", name, k)
			}
			if _, ok := envVars()[k]; !ok && !mounted[name] {
				t.Errorf("Secret %s: key %s is not a variable of app.EnvVars()", name, k)
			}
		}
	}
}

func TestK8sNATS(t *testing.T) {
	objs := loadK8s(t)
	host, port := hostPort(t, "AGENTMESH_NATS_URL", natsClientURL)
	svc, sts := findService(objs, host)
	if svc == nil || sts == nil || sts.kind() != "StatefulSet" {
		t.Fatalf("deploy/k8s: no Service %q selecting a NATS StatefulSet", host)
	}
	if servicePort(svc, 4222) == nil || port != "4222" {
		t.Errorf("%s: no port 4222", svc)
	}
	if r := get(sts.doc, "spec", "replicas"); r != 3 {
		t.Errorf("%s: replicas %v, want 3", sts, r)
	}
	headless := str(sts.doc, "spec", "serviceName")
	if hs, _ := findService(objs, headless); hs == nil || str(hs.doc, "spec", "clusterIP") != "None" {
		t.Errorf("%s: serviceName %q is not a headless Service", sts, headless)
	}
	// The config it mounts: JetStream with sync_interval always and a route to every server.
	var conf string
	for _, v := range list(sts.doc, "spec", "template", "spec", "volumes") {
		cm := str(v, "configMap", "name")
		for _, src := range list(v, "projected", "sources") { // projected with the auth Secret
			if n := str(src, "configMap", "name"); n != "" {
				cm = n
			}
		}
		if cm == "" {
			continue
		}
		for _, o := range objs {
			if o.kind() == "ConfigMap" && o.name() == cm {
				for _, d := range mapping(o.doc, "data") {
					conf += fmt.Sprint(d)
				}
			}
		}
	}
	if conf == "" {
		t.Fatalf("%s: mounts no ConfigMap with the nats-server config", sts)
	}
	checkJetStreamConf(t, sts.String()+" config", conf)
	for i := 0; i < 3; i++ {
		route := fmt.Sprintf("%s-%d.%s.%s.svc", sts.name(), i, headless, namespace)
		if !strings.Contains(conf, route) {
			t.Errorf("%s config: no cluster route to %s", sts, route)
		}
	}
}

// The Kubernetes files are safe as shipped too: nothing is reachable from
// outside the cluster (every Service is ClusterIP, no pod takes a host port
// or the host's network), and the router cannot run without API keys (they
// come from the Secret, never an empty literal). That each pod mounts only
// its own bus credential is TestK8sBusLocked.
func TestK8sSafeAsShipped(t *testing.T) {
	objs := loadK8s(t)
	for _, o := range objs {
		if o.kind() == "Service" {
			if typ := str(o.doc, "spec", "type"); typ != "" && typ != "ClusterIP" {
				t.Errorf("%s: type %s publishes the service outside the cluster; expose it with an Ingress or gateway you configure", o, typ)
			}
		}
	}
	routers := 0
	for _, w := range workloads(objs) {
		pod := mapping(w.doc, "spec", "template", "spec")
		if get(pod, "hostNetwork") == true {
			t.Errorf("%s: hostNetwork puts its ports on the node's interfaces", w)
		}
		for _, c := range list(pod, "containers") {
			for _, p := range list(c, "ports") {
				if get(p, "hostPort") != nil {
					t.Errorf("%s: hostPort %v publishes on the node's interfaces", w, get(p, "hostPort"))
				}
			}
			if args := strings_(list(c, "args")); len(args) == 0 || args[0] != "router" {
				continue
			}
			routers++
			var keys, file any
			for _, e := range list(c, "env") {
				switch str(e, "name") {
				case "AGENTMESH_API_KEYS":
					keys = e
				case "AGENTMESH_API_KEYS_FILE":
					file = e
				}
			}
			switch {
			case keys == nil && file == nil:
				t.Errorf("%s: neither AGENTMESH_API_KEYS nor AGENTMESH_API_KEYS_FILE: the API would run without authentication", w)
			case keys != nil && mapping(keys, "valueFrom", "secretKeyRef") == nil:
				t.Errorf("%s: AGENTMESH_API_KEYS is a literal %q: take it from the Secret", w, str(keys, "value"))
			}
		}
	}
	if routers != 1 {
		t.Errorf("deploy/k8s: %d router containers, want 1", routers)
	}
}

// ---------------------------------------------------------------------------
// Dockerfile, Makefile, .ci/run
// ---------------------------------------------------------------------------

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dockerInstructions joins continuation lines and drops comments.
func dockerInstructions(src string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := dockerInstructions(readFile(t, "Dockerfile"))
	var froms, runs, copies, envs []string
	var entrypoint, user string
	for _, in := range ins {
		op, rest, _ := strings.Cut(in, " ")
		switch strings.ToUpper(op) {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			runs = append(runs, rest)
		case "COPY":
			copies = append(copies, rest)
		case "ENV":
			envs = append(envs, rest)
		case "ENTRYPOINT":
			entrypoint = rest
		case "USER":
			user = rest
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:1.26-bookworm ") || froms[1] != "debian:bookworm-slim" {
		t.Errorf("Dockerfile: stages %q, want golang:1.26-bookworm (builder) then debian:bookworm-slim", froms)
	}
	if entrypoint != `["agentmesh"]` {
		t.Errorf("Dockerfile: ENTRYPOINT %s, want [\"agentmesh\"]", entrypoint)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("Dockerfile: USER %q, want a non-root user", user)
	}
	allRuns := strings.Join(runs, "\n")
	for _, want := range []string{"ca-certificates", "python3", "nodejs", "-trimpath", "./services/cmd/agentmesh", "./services/cmd/amctl", "github.com/agentmesh/agentmesh/services/app.Version="} {
		if !strings.Contains(allRuns, want) {
			t.Errorf("Dockerfile: no RUN mentions %q", want)
		}
	}
	// The agent child is built with the Makefile's tags (no gRPC, no
	// x/net/trace): the image's children start as `make build`'s do.
	mk := readFile(t, "Makefile")
	if m := regexp.MustCompile(`(?m)^AGENT_BUILD := (.*)$`).FindStringSubmatch(mk); m == nil {
		t.Errorf("Makefile: no AGENT_BUILD")
	} else {
		tm := regexp.MustCompile(`(?m)^NOGRPC_TAG := (\S+)$`).FindStringSubmatch(mk)
		build := m[1]
		if tm != nil {
			build = strings.ReplaceAll(build, "$(NOGRPC_TAG)", tm[1])
		}
		tags := regexp.MustCompile(`-tags (\S+)`).FindStringSubmatch(build)
		// The -tags of the command that builds the agent ("" without).
		agentTags, built := "", false
		for _, run := range runs {
			for _, cmd := range strings.Split(run, "&&") {
				if strings.Contains(cmd, "go build") && strings.Contains(cmd, "./services/cmd/agentmesh-agent") {
					built = true
					if at := regexp.MustCompile(`-tags (\S+)`).FindStringSubmatch(cmd); at != nil {
						agentTags = at[1]
					}
				}
			}
		}
		switch {
		case tags == nil:
			t.Errorf("Makefile: AGENT_BUILD %q has no -tags", m[1])
		case !built:
			t.Errorf("Dockerfile: no RUN builds ./services/cmd/agentmesh-agent")
		case agentTags != tags[1]:
			t.Errorf("Dockerfile: the agent child is built with -tags %q, the Makefile's AGENT_BUILD with %q", agentTags, tags[1])
		}
	}
	installed := false
	for _, c := range copies {
		if strings.HasPrefix(c, "--from=") && strings.Contains(c, "agentmesh") && strings.Contains(c, "amctl") {
			installed = true
		}
	}
	if !installed {
		t.Errorf("Dockerfile: the runtime stage does not COPY both agentmesh and amctl from the builder")
	}
	var names []string
	for _, e := range envs {
		for _, kv := range regexp.MustCompile(`([A-Z_][A-Z0-9_]*)=`).FindAllStringSubmatch(e, -1) {
			if strings.HasPrefix(kv[1], "AGENTMESH_") || strings.HasPrefix(kv[1], "OTEL_") {
				names = append(names, kv[1])
			}
		}
	}
	// The image's ENV applies to every subcommand: each must at least be a variable agentmesh reads.
	all := envVars()
	for _, n := range names {
		if _, ok := all[n]; !ok {
			t.Errorf("Dockerfile: ENV %s is not in app.EnvVars()", n)
		}
	}
	if len(names) == 0 {
		t.Errorf("Dockerfile: no ENV of agentmesh: the servers would listen on loopback only")
	}

	ignore := strings.Fields(readFile(t, ".dockerignore"))
	for _, want := range []string{".git", "bin"} {
		if !slices.Contains(ignore, want) {
			t.Errorf(".dockerignore: does not exclude %s", want)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "services", "pkg", "proto"} {
		if slices.Contains(ignore, keep) {
			t.Errorf(".dockerignore: excludes %s, which the build needs", keep)
		}
	}
}

// makeTargets returns the Makefile's targets and their `## ` help text.
func makeTargets(src string) map[string]string {
	targets := map[string]string{}
	re := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):[^=]*?(?:## (.*))?$`)
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		targets[m[1]] = m[2]
	}
	return targets
}

var requiredTargets = []string{"help", "generate", "generate-check", "lint", "test", "bench", "dev", "build", "tidy-check", "clean"}

func TestMakefileTargets(t *testing.T) {
	targets := makeTargets(readFile(t, "Makefile"))
	for _, name := range requiredTargets {
		help, ok := targets[name]
		if !ok {
			t.Errorf("Makefile: no target %s", name)
		} else if help == "" {
			t.Errorf("Makefile: target %s has no `## ` help comment", name)
		}
	}
}

// makeEnv is the environment without what a parent make passes down (under
// `make test PKGS=...` MAKEFLAGS carries PKGS=... to every make below it).
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// makeDryRun runs `make -n` in the repository root (nothing is executed).
func makeDryRun(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make is not installed, and CI installs it (.ci/run)")
		}
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", append([]string{"-n", "--no-print-directory"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = makeEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

func TestMakefileCommands(t *testing.T) {
	tests := []struct {
		target string
		want   []string
	}{
		{"test", []string{"go test -race -count=1 -timeout 30m", "./..."}},
		{"build", []string{"go build -trimpath", "-X github.com/agentmesh/agentmesh/services/app.Version=v9.9.9", "-o bin/", "./services/cmd/agentmesh", "./services/cmd/amctl"}},
		{"dev", []string{"go run ./services/cmd/agentmesh dev"}},
		{"bench", []string{"go run ./services/cmd/ambench -n 10"}},
		{"tidy-check", []string{"go mod tidy -diff"}},
		{"lint", []string{"gofmt -l", "go vet ./...", "buf lint"}},
		{"generate-check", []string{"buf generate", "git diff --exit-code", "git ls-files --others --exclude-standard"}},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			out := makeDryRun(t, tt.target, "VERSION=v9.9.9", "BENCH_ARGS=-n 10")
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("make -n %s: no %q in\n%s", tt.target, w, out)
				}
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		cmd := exec.Command("make", "--no-print-directory", "help")
		cmd.Dir = repoRoot
		cmd.Env = makeEnv()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make help: %v", err)
		}
		for _, name := range requiredTargets {
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\s`).Match(out) {
				t.Errorf("make help does not list %s:\n%s", name, out)
			}
		}
	})
}

func TestCIRun(t *testing.T) {
	path := filepath.Join(repoRoot, ".ci", "run")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Errorf(".ci/run is not executable (mode %v)", info.Mode())
	}
	src := readFile(t, ".ci/run")
	if !strings.HasPrefix(src, "#!/usr/bin/env bash\n") && !strings.HasPrefix(src, "#!/bin/bash\n") {
		t.Errorf(".ci/run: not a bash script (first line %q)", strings.SplitN(src, "\n", 2)[0])
	}
	if !regexp.MustCompile(`(?m)^set -euo pipefail$`).MatchString(src) {
		t.Errorf(".ci/run: no `set -euo pipefail`")
	}
	// Only code counts, not comments.
	var code []string
	for _, line := range strings.Split(src, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			code = append(code, l)
		}
	}
	body := strings.Join(code, "\n")
	for _, want := range []string{"make test", "make lint", "make generate-check", "make tidy-check", "make tools", "apt-get install -y", "postgresql", "pg_config"} {
		if !regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(want) + `($|[^\w-])`).MatchString(body) {
			t.Errorf(".ci/run: does not run %q", want)
		}
	}
	if strings.Index(body, "make test") < strings.Index(body, "make lint") {
		t.Errorf(".ci/run: make test should come after the quick checks")
	}
	if _, ok := makeTargets(readFile(t, "Makefile"))["test"]; !ok {
		t.Errorf("Makefile: no test target for .ci/run to call")
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
			t.Errorf("bash -n .ci/run: %v\n%s", err, out)
		}
	}
}

// TestVersionVariable checks that services/app declares the string variable
// Version that `make build` and the Dockerfile set with -ldflags -X (the
// linker ignores -X of a variable that does not exist).
func TestVersionVariable(t *testing.T) {
	fset := token.NewFileSet()
	dir := filepath.Join(repoRoot, "services", "app")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != "Version" {
						continue
					}
					typ, _ := vs.Type.(*ast.Ident)
					lit := i < len(vs.Values)
					if typ != nil && typ.Name == "string" || lit && isStringLit(vs.Values[i]) {
						return
					}
					t.Fatalf("services/app: Version is not a string variable (-X needs one)")
				}
			}
		}
	}
	t.Errorf("services/app: no package-level `var Version string` for -ldflags -X .../services/app.Version")
}

func isStringLit(e ast.Expr) bool {
	b, ok := e.(*ast.BasicLit)
	return ok && b.Kind == token.STRING
}
