package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Resolver resolves host names; *net.Resolver satisfies it.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Guard dials only addresses the policy allows: its DialContext is an
// http.Transport's.
type Guard struct {
	allow    Allowlist
	resolver Resolver
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
}

// Options of a Guard. The zero value is usable.
type Options struct {
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// DialContext opens a connection to an address that passed the checks
	// (always "ip:port", never a name). nil means a net.Dialer whose
	// Control hook checks the address once more. Tests set it to record
	// every dial.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// Dialer is the net.Dialer used when DialContext is nil (its
	// ControlContext is replaced by the Guard's check).
	Dialer net.Dialer
}

// New returns a Guard allowing the allowlist entries (ParseAllowlist).
func New(allow []string, o Options) (*Guard, error) {
	al, err := ParseAllowlist(allow)
	if err != nil {
		return nil, err
	}
	g := &Guard{allow: al, resolver: o.Resolver, dial: o.DialContext}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dial == nil {
		d := o.Dialer
		d.ControlContext = g.control
		g.dial = d.DialContext
	}
	return g, nil
}

// Allowlist returns the Guard's allowlist.
func (g *Guard) Allowlist() Allowlist { return g.allow }

// localhostAddrs are what "localhost" and "*.localhost" mean (RFC 6761):
// they are never sent to a resolver.
var localhostAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// Addrs returns the addresses host (as the URL names it) may be reached
// at on port: the literal address, or every address it resolves to when
// resolve is set (nil for a name when it is not: checked at dial time).
// Any refused address refuses the host: a name is trusted only when
// everything it resolves to is.
func (g *Guard) Addrs(ctx context.Context, host, port string, resolve bool) ([]netip.Addr, error) {
	var addrs []netip.Addr
	lname := strings.ToLower(strings.TrimSuffix(host, "."))
	if ip, ok, numeric := HostIP(host); ok {
		addrs = []netip.Addr{ip}
	} else if numeric {
		return nil, fmt.Errorf("%w: %q is not a valid address", ErrBlocked, host)
	} else if lname == "localhost" || strings.HasSuffix(lname, ".localhost") {
		addrs = localhostAddrs
	} else if !resolve {
		return nil, nil
	} else {
		ipas, err := g.resolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ipa := range ipas {
			a, ok := netip.AddrFromSlice(ipa.IP)
			if !ok {
				return nil, fmt.Errorf("%w: %s resolved to a malformed address", ErrBlocked, host)
			}
			addrs = append(addrs, a.Unmap().WithZone(ipa.Zone))
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	for _, a := range addrs {
		if g.allow.Allows(host, a, port) {
			continue
		}
		if err := Check(a); err != nil {
			if a.String() != strings.Trim(host, "[]") {
				return nil, fmt.Errorf("%s: %w (not in the allowlist)", host, err)
			}
			return nil, fmt.Errorf("%w (not in the allowlist)", err)
		}
	}
	return addrs, nil
}

// DialContext resolves the host once, checks every address, and connects
// only to checked addresses.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := g.Addrs(ctx, host, port, true)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := g.dial(context.WithValue(ctx, hostKey{}, host), network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// hostKey carries the URL's host from DialContext to control.
type hostKey struct{}

// control runs in the default dialer just before connect(2): a last check
// of the very address the socket connects to, against the host the URL
// named (for allowlisted names).
func (g *Guard) control(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrBlocked, address)
	}
	host, _ := ctx.Value(hostKey{}).(string)
	if g.allow.Allows(host, ap.Addr(), strconv.Itoa(int(ap.Port()))) {
		return nil
	}
	return Check(ap.Addr())
}
