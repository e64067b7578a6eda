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
	dir, _ := busInitSplit(t, hosts)
	return dir
}

// busInitSplit runs `agentmesh bus init --split` into temporary
// directories: the bundle's and the one holding each container's own.
func busInitSplit(t *testing.T, hosts string) (dir, split string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "bus")
	split = filepath.Join(t.TempDir(), "split")
	stdout := os.Stdout
	devnull, _ := os.Open(os.DevNull)
	os.Stdout = devnull // bus init reports on stdout
	code := app.Main([]string{"bus", "init", "--dir", dir, "--split", split, "--tls-hosts", hosts})
	os.Stdout = stdout
	devnull.Close()
	if code != 0 {
		t.Fatalf("agentmesh bus init: exit %d", code)
	}
	return dir, split
}

// mount is one volume of a compose service.
type mount struct {
	volume, path string
	readOnly     bool
}

func mounts(s composeService) []mount {
	var out []mount
	for _, v := range strings_(list(s.raw, "volumes")) {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			out = append(out, mount{volume: parts[0], path: parts[1], readOnly: len(parts) >= 3 && parts[2] == "ro"})
		}
	}
	return out
}

// Each compose container mounts only its own bus credential: bus-init
// writes the bundle (operator and account seeds, every identity) into a
// volume nobody else mounts and each container's own files into a volume of
// its kind (`agentmesh bus init --split`); what each volume holds is
// checked by running bus init.
func TestComposeBusLocked(t *testing.T) {
	services := loadCompose(t)
	initSvc, ok := services["bus-init"]
	if !ok {
		t.Fatal("compose: no bus-init service writing the bus credentials")
	}
	flag := func(name string) string {
		i := slices.Index(initSvc.command, name)
		if i < 0 || i+1 >= len(initSvc.command) {
			return ""
		}
		return initSvc.command[i+1]
	}
	if len(initSvc.command) < 2 || initSvc.command[0] != "bus" || initSvc.command[1] != "init" || flag("--dir") == "" || flag("--split") == "" {
		t.Fatalf("compose bus-init: command %v, want `bus init --dir DIR --split OUT ...`", initSvc.command)
	}
	keys := ""
	split := map[string]string{} // kind (service, nats) → its volume
	for _, m := range mounts(initSvc) {
		switch {
		case m.path == flag("--dir"):
			keys = m.volume
		case filepath.Dir(m.path) == flag("--split"):
			split[filepath.Base(m.path)] = m.volume
		}
	}
	if keys == "" {
		t.Fatalf("compose bus-init: no volume mounted at %s", flag("--dir"))
	}
	kindOf := map[string]string{} // volume → kind
	for kind := range app.SplitFiles() {
		v, ok := split[kind]
		if !ok {
			t.Errorf("compose bus-init: no volume of its own for %s at %s/%s", kind, flag("--split"), kind)
			continue
		}
		if other, dup := kindOf[v]; dup || v == keys {
			t.Errorf("compose bus-init: volume %s holds both %s and %s", v, other, kind)
		}
		kindOf[v] = kind
	}
	for _, name := range sortedKeys(services) {
		s := services[name]
		if name == "bus-init" {
			continue
		}
		where := "compose " + name
		kind := ""
		if strings.HasPrefix(s.image, "nats:") {
			kind = app.SplitNATS
		} else if s.agentmesh() && len(s.command) > 0 && reads("AGENTMESH_NATS_URL", s.command[0]) {
			kind = s.command[0]
		}
		own := ""
		for _, m := range mounts(s) {
			if m.volume == keys {
				t.Errorf("%s: mounts %s, the bus keys (operator and account seeds, every identity)", where, keys)
			}
			k, isBus := kindOf[m.volume]
			if !isBus {
				continue
			}
			if k != kind {
				t.Errorf("%s: mounts %s, the bus credentials of %s", where, m.volume, k)
				continue
			}
			if !m.readOnly {
				t.Errorf("%s: mounts %s writable", where, m.volume)
			}
			own = m.path
		}
		if kind == "" {
			continue
		}
		if own == "" {
			t.Errorf("%s: does not mount its bus credentials volume %s", where, split[kind])
			continue
		}
		if str(s.raw, "depends_on", "bus-init", "condition") != "service_completed_successfully" {
			t.Errorf("%s: does not wait for bus-init to complete", where)
		}
		if kind != app.SplitNATS {
			checkComposeCreds(t, where, kind, own, s)
		}
	}
	conf, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	checkLockedConf(t, "deploy/nats/nats.conf", string(conf), true)
	checkSplit(t)
}

// checkComposeCreds checks where a service finds its own identity.
func checkComposeCreds(t *testing.T, where, cmd, mount string, s composeService) {
	t.Helper()
	for _, seen := range []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/proc"} {
		if mount == seen || strings.HasPrefix(mount, seen) {
			t.Errorf("%s: bus credentials mounted at %s, which the agents' sandbox can read", where, mount)
		}
	}
	if want := mount + "/" + busauth.CredsFile(cmd); s.env["AGENTMESH_NATS_CREDS"] != want {
		t.Errorf("%s: AGENTMESH_NATS_CREDS %q, want its own identity %s", where, s.env["AGENTMESH_NATS_CREDS"], want)
	}
	if want := mount + "/ca.pem"; s.env["AGENTMESH_NATS_CA"] != want {
		t.Errorf("%s: AGENTMESH_NATS_CA %q, want %s (TLS to the bus)", where, s.env["AGENTMESH_NATS_CA"], want)
	}
	if cmd == "state" {
		if want := mount + "/" + busauth.TapSignerFile; s.env["AGENTMESH_NATS_TAP_SIGNER"] != want {
			t.Errorf("%s: AGENTMESH_NATS_TAP_SIGNER %q, want %s", where, s.env["AGENTMESH_NATS_TAP_SIGNER"], want)
		}
	} else if _, ok := s.env["AGENTMESH_NATS_TAP_SIGNER"]; ok {
		t.Errorf("%s: only state holds the tap signing key", where)
	}
}

// checkSplit runs `agentmesh bus init --split` and checks that each
// directory holds exactly its kind's files: no seed of the operator or an
// account, no other identity, no admin identity.
func checkSplit(t *testing.T) {
	t.Helper()
	_, split := busInitSplit(t, "nats-1,localhost")
	for kind, files := range app.SplitFiles() {
		var want []string
		for _, f := range files {
			want = append(want, filepath.Base(f))
		}
		entries, err := os.ReadDir(filepath.Join(split, kind))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("bus init --split: %s/ holds %v, want exactly %v", kind, got, want)
		}
		for _, name := range got {
			if strings.HasSuffix(name, ".nk") && name != busauth.TapSignerFile || name == busauth.AdminCredsFile {
				t.Errorf("bus init --split: %s/ holds %s, a key no container may hold", kind, name)
			}
		}
	}
}

// Every port the compose file publishes, the router's included, is bound
// to the host's loopback: nothing is reachable from other machines as
// shipped.
func TestComposePortsOnLoopback(t *testing.T) {
	services := loadCompose(t)
	for _, name := range sortedKeys(services) {
		for _, p := range services[name].ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("compose %s: port %q is published on every interface; bind it to 127.0.0.1", name, p)
			}
		}
	}
}

// The compose router cannot start without API keys: its setting is a
// required variable (or a keys file), never empty, never a key written in
// the file.
func TestComposeRouterRequiresKeys(t *testing.T) {
	services := loadCompose(t)
	required := regexp.MustCompile(`^\$\{AGENTMESH_API_KEYS:\?[^}]+\}$`)
	n := 0
	for _, name := range sortedKeys(services) {
		s := services[name]
		if !s.agentmesh() || len(s.command) == 0 || s.command[0] != "router" {
			continue
		}
		n++
		keys, hasKeys := s.env["AGENTMESH_API_KEYS"]
		file := s.env["AGENTMESH_API_KEYS_FILE"]
		switch {
		case hasKeys && !required.MatchString(keys):
			t.Errorf("compose %s: AGENTMESH_API_KEYS %q: want ${AGENTMESH_API_KEYS:?...} (compose refuses to start without keys)", name, keys)
		case !hasKeys && file == "":
			t.Errorf("compose %s: neither AGENTMESH_API_KEYS nor AGENTMESH_API_KEYS_FILE: the API would run without authentication", name)
		}
	}
	if n == 0 {
		t.Fatal("compose: no router")
	}
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
	_, split := busInitSplit(t, "localhost,127.0.0.1")
	conf, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The container's paths, here: /etc/nats/bus → the NATS servers' own
	// directory of the split, /data → tmp; nats-1 of the cluster, its
	// routes to the other two (not running) retried in the background.
	etc := filepath.Join(tmp, "etc")
	if err := os.MkdirAll(etc, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(split, app.SplitNATS), filepath.Join(etc, "bus")); err != nil {
		t.Fatal(err)
	}
	c := strings.ReplaceAll(string(conf), "/etc/nats/", etc+"/")
	c = strings.ReplaceAll(c, "store_dir: /data", "store_dir: "+filepath.Join(tmp, "data"))
	c = strings.ReplaceAll(c, "$SERVER_NAME", "nats-1")
	c = strings.Replace(c, "port: 4222", "port: -1", 1)
	c = strings.Replace(c, "port: 6222", "port: -1", 1)
	c = strings.Replace(c, "http_port: 8222", "", 1)
	path := filepath.Join(etc, "nats.conf")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server config: %v", err)
	}
	if opts.Cluster.TLSConfig == nil || len(opts.Routes) != 3 {
		t.Errorf("nats.conf: route TLS %v, %d routes; want verified TLS and a route to each of the 3 servers", opts.Cluster.TLSConfig != nil, len(opts.Routes))
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
	// The router's own directory of the split is all it needs.
	bus := filepath.Join(split, subjects.ServiceRouter)
	url := fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	ca := filepath.Join(bus, "ca.pem")

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
