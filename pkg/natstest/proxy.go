package natstest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Proxy is a TCP proxy in front of a server's client port that reads the
// NATS protocol both ways, so a test can lose one message the way a
// network does: the connection carrying it closes before it is passed on,
// and the client reconnects (through the proxy) as it would after a blip.
// Connect a service through it with ConnectVia.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu sync.Mutex
	// loseRequest, loseReply: the subject whose next request (delivered
	// to a subscriber through the proxy), or that request's reply (sent
	// by that subscriber), is lost; "" when none is armed.
	loseRequest, loseReply string
	lost                   int
	// cut: connections are closed and new ones refused (Cut, Heal).
	cut   bool
	conns map[*proxied]bool
}

// NewProxy starts a proxy to the client listener at target (host:port),
// closed at cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, ln: ln, target: target, conns: map[*proxied]bool{}}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

// URL is the proxy's client URL.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// LoseNextRequest arms the proxy: the next request on subject that it
// would deliver to a subscriber is lost (the subscriber never sees it).
func (p *Proxy) LoseNextRequest(subject string) {
	p.mu.Lock()
	p.loseRequest = subject
	p.mu.Unlock()
}

// LoseNextReply arms the proxy: the subscriber handles the next request on
// subject it delivers, and the reply it sends is lost.
func (p *Proxy) LoseNextReply(subject string) {
	p.mu.Lock()
	p.loseReply = subject
	p.mu.Unlock()
}

// Lost is how many messages the proxy lost.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Cut closes every connection through the proxy and refuses new ones
// until Heal: its clients are off the bus, the server and the others on.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[*proxied]bool{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Heal lets clients connect through the proxy again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// ConnectVia connects through p as a service identity of node ("" = a
// test driver), reconnecting without end.
func (n *Node) ConnectVia(t testing.TB, p *Proxy, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return dial(t, p.URL(), creds(t, n.auth, service), service, opts...)
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.carry(in)
	}
}

// carry proxies one client connection: client → server frames are
// checked for the armed reply, server → client frames for the armed
// request.
func (p *Proxy) carry(in net.Conn) {
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	c := &proxied{p: p, client: in, server: out}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	go c.pipe(out, in, c.fromClient)
	c.pipe(in, out, c.fromServer)
}

// proxied is one connection through the proxy.
type proxied struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once

	mu    sync.Mutex
	reply string // the reply subject of the request whose reply is lost
}

func (c *proxied) close() {
	c.once.Do(func() { c.client.Close(); c.server.Close() })
}

// pipe copies frames from src to dst until either closes; keep says
// whether a frame (its control line's fields) is passed on.
func (c *proxied) pipe(dst, src net.Conn, keep func(op string, fields []string) bool) {
	defer c.close()
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		frame := append([]byte(nil), line...)
		fields := bytes.Fields(line)
		op := ""
		if len(fields) > 0 {
			op = string(bytes.ToUpper(fields[0]))
		}
		if n := payloadSize(op, fields); n >= 0 {
			body := make([]byte, n+2) // the payload and its CRLF
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			frame = append(frame, body...)
		}
		strs := make([]string, len(fields))
		for i, f := range fields {
			strs[i] = string(f)
		}
		if !keep(op, strs) {
			return // lost: the connection closes with it
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// payloadSize is the size of the payload that follows a control line (its
// last field), or -1 when the operation carries none.
func payloadSize(op string, fields [][]byte) int {
	switch op {
	case "PUB", "HPUB", "MSG", "HMSG":
		n, err := strconv.Atoi(string(fields[len(fields)-1]))
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

// fromServer passes a frame on to the client unless it is the armed
// request; it notes the reply subject of the request whose reply is lost.
func (c *proxied) fromServer(op string, f []string) bool {
	if op != "MSG" && op != "HMSG" || len(f) < 4 {
		return true
	}
	subject, reply := f[1], ""
	if op == "MSG" && len(f) == 5 || op == "HMSG" && len(f) == 6 {
		reply = f[3]
	}
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.loseRequest != "" && subject == p.loseRequest:
		p.loseRequest = ""
		p.lost++
		return false
	case p.loseReply != "" && subject == p.loseReply && reply != "":
		p.loseReply = ""
		c.mu.Lock()
		c.reply = reply
		c.mu.Unlock()
	}
	return true
}

// fromClient passes a frame on to the server unless it is the reply to
// lose.
func (c *proxied) fromClient(op string, f []string) bool {
	if op != "PUB" && op != "HPUB" || len(f) < 3 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply == "" || f[1] != c.reply {
		return true
	}
	c.reply = ""
	c.p.mu.Lock()
	c.p.lost++
	c.p.mu.Unlock()
	return false
}
