package router

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ---- connections ----

// connLimiter is the router's listener: it holds at most max connections,
// and closes a connection that has not made one authenticated agentmesh
// RPC within authTimeout of being accepted. When it is full, a new
// connection evicts the oldest connection that never authenticated; when
// every connection authenticated, the new one is closed. So idle or
// half-open connections can neither exhaust the router's file descriptors
// nor keep a fresh client out.
type connLimiter struct {
	net.Listener
	max         int
	authTimeout time.Duration
	log         *slog.Logger

	mu      sync.Mutex
	conns   map[string]*trackedConn // by remote address
	refused atomic.Int64
	evicted atomic.Int64
	lastLog time.Time
}

type trackedConn struct {
	net.Conn
	l        *connLimiter
	key      string
	accepted time.Time
	authed   atomic.Bool
	// timer closes the connection if it never authenticates. Its func
	// may run (and Close read it) before AfterFunc's result is stored.
	timer atomic.Pointer[time.Timer]
	once  sync.Once
}

func newConnLimiter(l net.Listener, max int, authTimeout time.Duration, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: l, max: max, authTimeout: authTimeout, log: log, conns: map[string]*trackedConn{}}
}

// Accept returns the next connection, making room as described above.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, l: l, key: c.RemoteAddr().String(), accepted: time.Now()}
		l.mu.Lock()
		if len(l.conns) >= l.max {
			victim := l.oldestUnauthenticated()
			if victim == nil {
				l.mu.Unlock()
				_ = c.Close()
				l.note(&l.refused, "connection refused: the router holds its maximum of authenticated connections")
				continue
			}
			delete(l.conns, victim.key)
			l.mu.Unlock()
			_ = victim.Close()
			l.note(&l.evicted, "connection that never authenticated closed to make room")
			l.mu.Lock()
		}
		l.conns[tc.key] = tc
		l.mu.Unlock()
		tc.timer.Store(time.AfterFunc(l.authTimeout, func() {
			if !tc.authed.Load() {
				_ = tc.Close()
			}
		}))
		return tc, nil
	}
}

// oldestUnauthenticated is called with l.mu held.
func (l *connLimiter) oldestUnauthenticated() *trackedConn {
	var old *trackedConn
	for _, c := range l.conns {
		if !c.authed.Load() && (old == nil || c.accepted.Before(old.accepted)) {
			old = c
		}
	}
	return old
}

// note counts an event and logs it at most once a second.
func (l *connLimiter) note(n *atomic.Int64, msg string) {
	total := n.Add(1)
	l.mu.Lock()
	logNow := time.Since(l.lastLog) > time.Second
	if logNow {
		l.lastLog = time.Now()
	}
	l.mu.Unlock()
	if logNow {
		l.log.Warn("router: "+msg, "total", total, "max_connections", l.max)
	}
}

// authenticated marks the connection from remote as authenticated.
func (l *connLimiter) authenticated(remote string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	c := l.conns[remote]
	l.mu.Unlock()
	if c != nil && !c.authed.Swap(true) {
		if t := c.timer.Load(); t != nil {
			t.Stop()
		}
	}
}

// open returns the number of connections held.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if t := c.timer.Load(); t != nil {
			t.Stop()
		}
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return err
}

// fdHeadroom is how many file descriptors the router keeps for everything
// but client connections (NATS, logs, the rest of the process).
const fdHeadroom = 256

// connLimit clamps the configured connection cap to what the process's
// open-file limit allows (Go raises the soft limit to the hard one at
// start-up; a cap above it would turn into accept errors instead).
func connLimit(want int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return want
	}
	room := int64(rl.Cur) - fdHeadroom
	if rl.Cur > 1<<30 {
		room = 1 << 30
	}
	if room < 16 {
		room = 16
	}
	return int(min(int64(want), room))
}

// ---- request rates ----

// orgLimiter bounds each org's request rate (a token bucket per org).
type orgLimiter struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newOrgLimiter(perSecond float64, burst int) *orgLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &orgLimiter{rate: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// allow takes a token from the caller's org, or answers ResourceExhausted
// with a RetryInfo detail saying when a token will be there.
func (o *orgLimiter) allow(c Caller) error {
	if o == nil {
		return nil
	}
	key := c.Org
	if c.Role == RolePlatform {
		key = "platform:" + c.KeyName
	}
	o.mu.Lock()
	lim := o.m[key]
	if lim == nil {
		lim = rate.NewLimiter(o.rate, o.burst)
		o.m[key] = lim
	}
	o.mu.Unlock()
	r := lim.Reserve()
	d := r.Delay()
	if d == 0 {
		return nil
	}
	r.Cancel()
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("org %q is over its request rate of %g/s (burst %d); retry in %s", c.Org, float64(o.rate), o.burst, d.Round(time.Millisecond)))
	if ds, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
		st = ds
	}
	return st.Err()
}

// ---- watch streams ----

// watchSlots bounds the WatchTask streams each org holds open at once.
type watchSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// acquire takes a slot for org or answers ResourceExhausted; release
// gives it back.
func (w *watchSlots) acquire(org string) (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[org] >= w.max {
		return nil, status.Errorf(codes.ResourceExhausted, "org %q already has %d WatchTask streams open (the maximum); close one first", org, w.max)
	}
	w.n[org]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.n[org]--; w.n[org] <= 0 {
				delete(w.n, org)
			}
		})
	}, nil
}
