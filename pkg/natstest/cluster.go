package natstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of embedded servers on loopback, sharing
// one set of bus identities, for tests of what a node loss, a partition or
// a stream leader election does. Every route between two members goes
// through a small TCP proxy of the test's, so Isolate can cut a member off
// the others the way a crash or a network partition does — without the
// leadership hand-over a clean shutdown makes (Stop). Clients connect over
// TCP: to every member (ConnectAs, Connect), so they reconnect elsewhere as
// real clients do, or to one member (ConnectTo).
type Cluster struct {
	t       testing.TB
	auth    *busauth.Bundle
	servers []*embednats.Server
	dirs    []string
	ports   []int // client ports, kept across a restart
	routes  []int // route listener ports
	links   map[[2]int]*link
}

// StartCluster starts a cluster of n servers (stopped at cleanup) and
// waits until JetStream has a meta leader.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	auth, err := busauth.New(subjects.Must(""))
	if err != nil {
		t.Fatalf("bus identities: %v", err)
	}
	c := &Cluster{t: t, auth: auth, servers: make([]*embednats.Server, n), links: map[[2]int]*link{}}
	for range n {
		c.dirs = append(c.dirs, t.TempDir())
		c.ports = append(c.ports, freePort(t))
		c.routes = append(c.routes, freePort(t))
	}
	for a := range n {
		for b := range n {
			if a != b {
				c.links[[2]int{a, b}] = newLink(t, fmt.Sprintf("127.0.0.1:%d", c.routes[b]))
			}
		}
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			if s != nil {
				s.Stop()
			}
		}
		for _, l := range c.links {
			l.close()
		}
	})
	for i := range n {
		c.start(i)
	}
	c.WaitMeta()
	return c
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	var routes []string
	for j := range c.servers {
		if j != i {
			routes = append(routes, "nats-route://"+c.links[[2]int{i, j}].addr())
		}
	}
	srv, err := embednats.Start(embednats.Config{ReadyTimeout: readyTimeout,
		StoreDir: filepath.Join(c.dirs[i], "js"), Port: c.ports[i], ServerName: fmt.Sprintf("natstest-%d", i),
		Auth: c.auth, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// Members gossip an address nobody listens on: every route stays
		// on the proxies.
		Cluster: embednats.Cluster{Name: "natstest", Port: c.routes[i], Routes: routes, Advertise: "127.0.0.1:1"},
	})
	if err != nil {
		c.t.Fatalf("start nats server %d: %v", i, err)
	}
	c.servers[i] = srv
}

// Server returns member i (nil while stopped).
func (c *Cluster) Server(i int) *embednats.Server { return c.servers[i] }

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.servers) }

// Auth returns the cluster's identities.
func (c *Cluster) Auth() *busauth.Bundle { return c.auth }

// URL is member i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i]) }

// URLs is every member's client URL, comma-separated (AGENTMESH_NATS_URL).
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.ports))
	for i := range c.ports {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// Stop shuts member i down cleanly (it hands over the leaderships it
// holds first, as nats-server does on shutdown).
func (c *Cluster) Stop(i int) {
	c.servers[i].Stop()
	c.servers[i] = nil
}

// Restart starts a stopped member again, on the same ports and data.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
}

// Isolate cuts member i off the other members: its routes are closed and
// refused until Heal, as for a crashed or partitioned server, and the
// others elect new leaders for what it led once their election timeout
// passes. Clients connected to it stay connected to it.
func (c *Cluster) Isolate(i int) { c.cut(i, true) }

// Heal reconnects an isolated member.
func (c *Cluster) Heal(i int) { c.cut(i, false) }

func (c *Cluster) cut(i int, cut bool) {
	for pair, l := range c.links {
		if pair[0] == i || pair[1] == i {
			l.setCut(cut)
		}
	}
}

// WaitMeta waits until a running member is the JetStream meta leader and
// every running member serves the account's JetStream API.
func (c *Cluster) WaitMeta() {
	c.t.Helper()
	poll.Until(c.t, 30*time.Second, func() error {
		for _, s := range c.servers {
			if s != nil && s.JetStreamIsLeader() {
				return nil
			}
		}
		return errors.New("no JetStream meta leader yet")
	})
	// A meta leader is not yet an account every member serves: until the
	// account's JetStream is set up on a member, its API answers "JetStream
	// not enabled for account" (seen under load). Ask each member once.
	for i, s := range c.servers {
		if s == nil {
			continue
		}
		nc := c.ConnectTo(c.t, i, "")
		poll.Until(c.t, 30*time.Second, func() error {
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
			return err
		})
		nc.Close()
	}
}

// StreamLeader returns the member leading stream, or -1.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.servers {
		if s != nil && s.JetStreamIsStreamLeader(c.auth.AccountPublicKey(), stream) {
			return i
		}
	}
	return -1
}

// ConnectAs connects as a service identity over TCP to every member
// (closed at cleanup).
func (c *Cluster) ConnectAs(t testing.TB, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return c.connect(t, c.URLs(), c.serviceCreds(t, service), service, opts...)
}

// ConnectTo connects as a service identity ("" = a test driver allowed
// everything) to member i only.
func (c *Cluster) ConnectTo(t testing.TB, i int, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return c.connect(t, c.URL(i), c.serviceCreds(t, service), service, opts...)
}

// Connect connects as a test driver allowed everything to every member.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return c.connect(t, c.URLs(), c.serviceCreds(t, ""), "", opts...)
}

func (c *Cluster) serviceCreds(t testing.TB, service string) []byte {
	t.Helper()
	return creds(t, c.auth, service)
}

func (c *Cluster) connect(t testing.TB, urls string, creds []byte, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return dial(t, urls, creds, service, opts...)
}

// creds are the credentials of a service identity of auth ("" = a test
// driver allowed everything).
func creds(t testing.TB, auth *busauth.Bundle, service string) []byte {
	t.Helper()
	var creds []byte
	var err error
	if service == "" {
		creds, err = auth.UserCreds("natstest-driver", subjects.Permission{Pub: []string{">"}, Sub: []string{">"}}, 0)
	} else {
		creds, err = auth.Creds(service)
	}
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// dial connects over TCP to urls with creds, reconnecting without end
// (every 50 ms); closed at cleanup.
func dial(t testing.TB, urls string, creds []byte, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	auth, err := busauth.ClientOptions(creds, service, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]nats.Option{nats.Name(t.Name() + "/" + service), nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond)}, auth...)
	nc, err := nats.Connect(urls, append(all, opts...)...)
	if err != nil {
		t.Fatalf("connect to %s as %q: %v", urls, service, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// link is a TCP proxy carrying the routes from one member to another;
// setCut(true) closes what it carries and refuses new connections.
type link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func newLink(t testing.TB, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go l.serve()
	return l
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) serve() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.carry(in)
	}
}

func (l *link) carry(in net.Conn) {
	out, err := net.DialTimeout("tcp", l.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !l.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, in)
	delete(l.conns, out)
	l.mu.Unlock()
}

func (l *link) track(conns ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	for _, c := range conns {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for c := range l.conns {
			c.Close()
		}
	}
}

func (l *link) close() {
	l.setCut(true)
	l.ln.Close()
}
