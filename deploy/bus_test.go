package deploy

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/app"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The locked bus in the deployment files (docs/security.md): every
// agentmesh service connects with its own credential over TLS, NATS trusts
// only the identities of `agentmesh bus init`, nothing is reachable from
// outside that need not be.

// secretVolumes names the Secrets some workload mounts as files.
func secretVolumes(objs []k8sObject) map[string]bool {
	out := map[string]bool{}
	for _, w := range workloads(objs) {
		for _, v := range list(w.doc, "spec", "template", "spec", "volumes") {
			if n := str(v, "secret", "secretName"); n != "" {
				out[n] = true
			}
			for _, src := range list(v, "projected", "sources") {
				if n := str(src, "secret", "name"); n != "" {
					out[n] = true
				}
			}
		}
	}
	return out
}

// busInit runs `agentmesh bus init` into a temporary directory.
func busInit(t *testing.T, hosts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bus")
	stdout := os.Stdout
	devnull, _ := os.Open(os.DevNull)
	os.Stdout = devnull // bus init reports on stdout
	code := app.Main([]string{"bus", "init", "--dir", dir, "--tls-hosts", hosts})
	os.Stdout = stdout
	devnull.Close()
	if code != 0 {
		t.Fatalf("agentmesh bus init: exit %d", code)
	}
	return dir
}

func TestComposeBusLocked(t *testing.T) {
	services := loadCompose(t)
	initSvc, ok := services["bus-init"]
	if !ok {
		t.Fatal("compose: no bus-init service writing the bus credentials")
	}
	if len(initSvc.command) < 4 || initSvc.command[0] != "bus" || initSvc.command[1] != "init" ||
		!slices.Contains(initSvc.command, "--dir") {
		t.Fatalf("compose bus-init: command %v, want `bus init --dir DIR ...`", initSvc.command)
	}
	dir := initSvc.command[slices.Index(initSvc.command, "--dir")+1]
	volume := ""
	for _, v := range strings_(list(initSvc.raw, "volumes")) {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == dir {
			volume = parts[0]
		}
	}
	if volume == "" {
		t.Fatalf("compose bus-init: no volume mounted at %s", dir)
	}

	// mountOf returns where service s mounts the credentials volume.
	mountOf := func(s composeService) string {
		for _, v := range strings_(list(s.raw, "volumes")) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[0] == volume {
				if len(parts) < 3 || parts[2] != "ro" {
					t.Errorf("compose %s: mounts %s writable", s.name, volume)
				}
				return parts[1]
			}
		}
		return ""
	}
	waitsForInit := func(s composeService) bool {
		return str(s.raw, "depends_on", "bus-init", "condition") == "service_completed_successfully"
	}

	for _, name := range sortedKeys(services) {
		s := services[name]
		if !s.agentmesh() || len(s.command) == 0 || !reads("AGENTMESH_NATS_URL", s.command[0]) {
			continue
		}
		cmd := s.command[0]
		where := "compose " + name
		mount := mountOf(s)
		if mount == "" {
			t.Errorf("%s: does not mount the bus credentials volume %s", where, volume)
			continue
		}
		for _, seen := range []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/proc"} {
			if mount == seen || strings.HasPrefix(mount, seen) {
				t.Errorf("%s: bus credentials mounted at %s, which the agents' sandbox can read", where, mount)
			}
		}
		if want := mount + "/" + busauth.CredsFile(cmd); s.env["AGENTMESH_NATS_CREDS"] != want {
			t.Errorf("%s: AGENTMESH_NATS_CREDS %q, want its own identity %s", where, s.env["AGENTMESH_NATS_CREDS"], want)
		}
		if want := mount + "/tls/ca.pem"; s.env["AGENTMESH_NATS_CA"] != want {
			t.Errorf("%s: AGENTMESH_NATS_CA %q, want %s (TLS to the bus)", where, s.env["AGENTMESH_NATS_CA"], want)
		}
		if cmd == "state" {
			if want := mount + "/" + busauth.TapSignerFile; s.env["AGENTMESH_NATS_TAP_SIGNER"] != want {
				t.Errorf("%s: AGENTMESH_NATS_TAP_SIGNER %q, want %s", where, s.env["AGENTMESH_NATS_TAP_SIGNER"], want)
			}
		} else if _, ok := s.env["AGENTMESH_NATS_TAP_SIGNER"]; ok {
			t.Errorf("%s: only state holds the tap signing key", where)
		}
		if !waitsForInit(s) {
			t.Errorf("%s: does not wait for bus-init to complete", where)
		}
	}

	nats := services["nats"]
	if !waitsForInit(nats) {
		t.Errorf("compose nats: does not wait for bus-init to complete")
	}
	natsMount := ""
	for _, v := range strings_(list(nats.raw, "volumes")) {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[0] == volume {
			natsMount = parts[1]
		}
	}
	if natsMount == "" {
		t.Errorf("compose nats: does not mount %s", volume)
	}
	// Published ports: NATS (and the scripted model, Postgres) on loopback
	// only; only the authenticated gRPC API on every interface.
	for _, name := range sortedKeys(services) {
		for _, p := range services[name].ports {
			loopback := strings.HasPrefix(p, "127.0.0.1:")
			if !loopback && !(name == "router" && published([]string{p}, "7400")) {
				t.Errorf("compose %s: port %q is published on every interface; bind it to 127.0.0.1", name, p)
			}
		}
	}

	conf, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	checkLockedConf(t, "deploy/nats/nats.conf", string(conf), false)
}

// checkLockedConf checks a nats-server config: it includes auth.conf and
// has a tls block for clients (and, for a cluster, a verified one on routes).
func checkLockedConf(t *testing.T, where, conf string, cluster bool) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^\s*include\s+\S*` + regexp.QuoteMeta(busauth.ServerConfigFile) + `\s*$`).MatchString(conf) {
		t.Errorf("%s: does not include %s (the identities of agentmesh bus init)", where, busauth.ServerConfigFile)
	}
	for _, bad := range []string{"no_auth_user", "authorization", "accounts {", "accounts:"} {
		if strings.Contains(conf, bad) {
			t.Errorf("%s: %q would add identities outside operator mode", where, bad)
		}
	}
	tls := regexp.MustCompile(`(?m)^tls\s*[:=]?\s*\{`).FindStringIndex(conf)
	if tls == nil {
		t.Errorf("%s: no top-level tls block: clients would talk to the bus in clear text", where)
	}
	if cluster && !regexp.MustCompile(`(?s)cluster\s*[:=]?\s*\{.*tls\s*[:=]?\s*\{[^}]*verify\s*[:=]\s*true`).MatchString(conf) {
		t.Errorf("%s: the cluster routes have no verified tls block", where)
	}
}

// The compose nats.conf, with the output of `agentmesh bus init`, runs a
// server that refuses anonymous and plain-text clients and lets a service
// in with its creds over TLS.
func TestComposeNATSConfigRuns(t *testing.T) {
	tmp := t.TempDir()
	bus := busInit(t, "localhost,127.0.0.1")
	conf, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The container's paths, here: /etc/nats/bus → the bus dir, /data → tmp.
	etc := filepath.Join(tmp, "etc")
	if err := os.MkdirAll(etc, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bus, filepath.Join(etc, "bus")); err != nil {
		t.Fatal(err)
	}
	c := strings.ReplaceAll(string(conf), "/etc/nats/", etc+"/")
	c = strings.ReplaceAll(c, "store_dir: /data", "store_dir: "+filepath.Join(tmp, "data"))
	c = strings.Replace(c, "port: 4222", "port: -1", 1)
	c = strings.Replace(c, "http_port: 8222", "", 1)
	path := filepath.Join(etc, "nats.conf")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server config: %v", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	ca := filepath.Join(bus, "tls", "ca.pem")

	if nc, err := nats.Connect(url, nats.RootCAs(ca)); err == nil {
		nc.Close()
		t.Error("anonymous client over TLS: connected, want refused")
	}
	creds := filepath.Join(bus, busauth.CredsFile(subjects.ServiceRouter))
	if nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.RootCAs(filepath.Join(tmp, "nothing.pem"))); err == nil {
		nc.Close()
		t.Error("client that cannot verify the server: connected, want refused")
	}
	nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.RootCAs(ca), nats.CustomInboxPrefix(subjects.InboxPrefix(subjects.ServiceRouter)))
	if err != nil {
		t.Fatalf("router with its creds over TLS: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("connection is not TLS")
	}
	if _, err := nc.SubscribeSync(subjects.Must("").TaskEventsAll()); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("router's own subscription: %v", err)
	}
	if err := nc.LastError(); err != nil {
		t.Errorf("router's own subscription refused: %v", err)
	}
}

func TestK8sBusLocked(t *testing.T) {
	objs := loadK8s(t)
	secrets := map[string]map[string]any{}
	for _, o := range objs {
		if o.kind() == "Secret" {
			secrets[o.name()] = mapping(o.doc, "stringData")
		}
	}
	for _, w := range workloads(objs) {
		pod := mapping(w.doc, "spec", "template", "spec")
		c := mapping(list(pod, "containers"), 0)
		args := strings_(list(c, "args"))
		if !strings.HasPrefix(str(c, "image"), "agentmesh") || len(args) == 0 || !reads("AGENTMESH_NATS_URL", args[0]) {
			continue
		}
		cmd := args[0]
		where := w.String()
		env := map[string]string{}
		for _, e := range list(c, "env") {
			env[str(e, "name")] = str(e, "value")
		}
		// The volume the creds path lies in, and what it holds.
		var files []string
		mountPath := ""
		for _, m := range list(c, "volumeMounts") {
			if p := str(m, "mountPath"); p != "" && strings.HasPrefix(env["AGENTMESH_NATS_CREDS"], p+"/") {
				mountPath = p
				for _, v := range list(pod, "volumes") {
					if str(v, "name") == str(m, "name") {
						secret := str(v, "secret", "secretName")
						data, ok := secrets[secret]
						if !ok {
							t.Errorf("%s: bus volume is not a Secret of deploy/k8s", where)
						}
						for _, it := range list(v, "secret", "items") {
							if _, ok := data[str(it, "key")]; !ok {
								t.Errorf("%s: item %s is not in Secret %s", where, str(it, "key"), secret)
							}
							files = append(files, str(it, "path"))
						}
					}
				}
			}
		}
		if mountPath == "" {
			t.Errorf("%s: AGENTMESH_NATS_CREDS %q is not in a mounted Secret", where, env["AGENTMESH_NATS_CREDS"])
			continue
		}
		// The agents' sandbox sees /etc, /usr, /bin, /sbin and /lib* of the
		// executor: a credential there would be readable by the child.
		for _, seen := range []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/proc"} {
			if mountPath == seen || strings.HasPrefix(mountPath, seen+"/") || strings.HasPrefix(mountPath, "/lib") {
				t.Errorf("%s: bus credentials mounted at %s, which the agents' sandbox can read", where, mountPath)
			}
		}
		want := []string{busauth.CredsFile(cmd), "ca.pem"}
		if cmd == "state" {
			want = append(want, busauth.TapSignerFile)
		}
		slices.Sort(want)
		slices.Sort(files)
		if !slices.Equal(files, want) {
			t.Errorf("%s: mounts %v of the bus Secret, want exactly its own %v", where, files, want)
		}
		if env["AGENTMESH_NATS_CREDS"] != mountPath+"/"+busauth.CredsFile(cmd) || env["AGENTMESH_NATS_CA"] != mountPath+"/ca.pem" {
			t.Errorf("%s: AGENTMESH_NATS_CREDS/CA %q %q, want its own creds and the CA", where, env["AGENTMESH_NATS_CREDS"], env["AGENTMESH_NATS_CA"])
		}
	}

	// NATS: operator mode and TLS, from the ConfigMap and Secret nats-auth
	// projected side by side.
	_, sts := findService(objs, "nats")
	if sts == nil {
		t.Fatal("no nats StatefulSet")
	}
	var conf string
	projected := map[string]bool{}
	for _, v := range list(sts.doc, "spec", "template", "spec", "volumes") {
		for _, src := range list(v, "projected", "sources") {
			if cm := str(src, "configMap", "name"); cm != "" {
				for _, o := range objs {
					if o.kind() == "ConfigMap" && o.name() == cm {
						conf = str(o.doc, "data", "nats.conf")
					}
				}
			}
			if s := str(src, "secret", "name"); s != "" {
				for k := range secrets[s] {
					projected[k] = true
				}
			}
		}
	}
	if conf == "" {
		t.Fatal("nats: no nats.conf in a projected volume")
	}
	checkLockedConf(t, sts.String()+" config", conf, true)
	for _, f := range []string{busauth.ServerConfigFile, "server.pem", "server-key.pem", "ca.pem"} {
		if !projected[f] {
			t.Errorf("%s: %s is not projected next to nats.conf", sts, f)
		}
	}
	// The config parses with a real auth.conf and real TLS files.
	bus := busInit(t, "nats")
	etc := t.TempDir()
	for src, dst := range map[string]string{
		busauth.ServerConfigFile: busauth.ServerConfigFile, "tls/server.pem": "server.pem",
		"tls/server-key.pem": "server-key.pem", "tls/ca.pem": "ca.pem",
	} {
		b, err := os.ReadFile(filepath.Join(bus, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := strings.ReplaceAll(conf, "/etc/nats/", etc+"/")
	c = strings.ReplaceAll(c, "$POD_NAME", "nats-0")
	c = strings.ReplaceAll(c, "store_dir: /data", "store_dir: "+t.TempDir())
	if err := os.WriteFile(filepath.Join(etc, "nats.conf"), []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(etc, "nats.conf"))
	if err != nil {
		t.Fatalf("k8s nats.conf with bus init output: %v", err)
	}
	if len(opts.TrustedOperators) != 1 || opts.TLSConfig == nil || opts.Cluster.TLSConfig == nil {
		t.Errorf("k8s nats.conf: operators %d, client TLS %v, route TLS %v; want operator mode and TLS on both",
			len(opts.TrustedOperators), opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil)
	}

	// NetworkPolicy: only the agentmesh services' pods reach NATS's client port.
	found := false
	for _, o := range objs {
		if o.kind() != "NetworkPolicy" || !matches(mapping(o.doc, "spec", "podSelector", "matchLabels"), mapping(sts.doc, "spec", "template", "metadata", "labels")) {
			continue
		}
		found = true
		for _, rule := range list(o.doc, "spec", "ingress") {
			for _, from := range list(rule, "from") {
				if get(from, "ipBlock") != nil || get(from, "namespaceSelector") != nil || get(from, "podSelector") == nil {
					t.Errorf("%s: ingress from %v: only pods of this namespace may reach NATS", o, from)
				}
			}
			if len(list(rule, "from")) == 0 {
				t.Errorf("%s: an ingress rule with no from admits everyone", o)
			}
		}
	}
	if !found {
		t.Errorf("deploy/k8s: no NetworkPolicy selects the NATS pods")
	}
}
