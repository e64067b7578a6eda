package ui

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed sign-ins are bounded per client — its IP address, an IPv6 one by
// its /64 (what one host is given) — so that one client trying keys is
// slowed down without locking everyone else out of the dashboard (a
// limit over all clients together let five wrong keys a second from
// anywhere refuse every person's sign-in). The table is bounded: when it
// is full, the clients whose budget has refilled are forgotten, and if
// none has, all are (keys are long random strings: the limit slows a
// guesser, it is not what makes guessing hopeless).

// maxSigninClients bounds the clients the sign-in limiter remembers.
const maxSigninClients = 10000

type signinLimiter struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newSigninLimiter() *signinLimiter {
	return &signinLimiter{m: map[string]*rate.Limiter{}}
}

// limited reports whether the client at remoteAddr has no failure left.
func (s *signinLimiter) limited(remoteAddr string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	lim := s.m[clientKey(remoteAddr)]
	return lim != nil && lim.TokensAt(now) < 1
}

// failed counts a failed sign-in of the client at remoteAddr.
func (s *signinLimiter) failed(remoteAddr string, now time.Time) {
	key := clientKey(remoteAddr)
	s.mu.Lock()
	defer s.mu.Unlock()
	lim := s.m[key]
	if lim == nil {
		if len(s.m) >= maxSigninClients {
			s.forget(now)
		}
		lim = rate.NewLimiter(signinRate, signinBurst)
		s.m[key] = lim
	}
	lim.AllowN(now, 1)
}

// forget drops the clients whose budget has refilled, or all of them if
// none has; s.mu is held.
func (s *signinLimiter) forget(now time.Time) {
	for k, lim := range s.m {
		if lim.TokensAt(now) >= signinBurst {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSigninClients {
		clear(s.m)
	}
}

// clientKey is the client a remote address stands for: its IP, or an
// IPv6 address's /64.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}
