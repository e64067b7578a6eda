// Package netguard is agentmesh's outbound address policy: the one check of
// the addresses an org's URL may reach (web_fetch, HTTP MCP servers, an
// agent's model endpoint, webhook deliveries). Loopback, private,
// link-local (cloud metadata), CGNAT, unique-local, unspecified, multicast,
// broadcast and reserved addresses — with their IPv4-mapped, NAT64 and 6to4
// IPv6 forms and the numeric spellings inet_aton accepts (2130706433,
// 0177.0.0.1, 0x7f.1) — are refused unless an allowlist names them. A Guard
// checks at connect time, in the dialer: a host name is resolved once, every
// address it resolves to is checked, and the connection goes to a checked
// address, checked once more in the socket's Control hook — no window for
// DNS rebinding.
package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrBlocked is returned (wrapped, with the address and the reason) when a
// URL names, resolves to or redirects to an address that must not be
// reached: loopback, private, link-local, CGNAT, unique-local, unspecified,
// multicast, broadcast, reserved, or an IPv6 form of one of these.
var ErrBlocked = errors.New("address not allowed")

// blockedRange is a range of refused addresses, with the reason given.
type blockedRange struct {
	prefix netip.Prefix
	why    string
}

// blockedV4 lists the IPv4 ranges that are not globally reachable (IANA
// special-purpose registry) plus multicast and the reserved 240/4.
var blockedV4 = []blockedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (this-network) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay anycast address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
}

// blockedV6 lists the IPv6 ranges refused outright. IPv4-mapped addresses
// are unmapped and NAT64 and 6to4 addresses have their IPv4 address
// extracted before these are consulted (see Check).
var blockedV6 = []blockedRange{
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible IPv6 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique-local (private) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Check reports whether ip may be reached when no allowlist entry names
// it: nil for a globally reachable unicast address, otherwise
// an error wrapping ErrBlocked that says what kind of address it is.
//
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are unmapped first, and the
// IPv4 address inside a NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address
// is checked as well, so no IPv6 spelling reaches a refused IPv4 address.
func Check(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrBlocked)
	}
	orig := ip
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		for _, r := range blockedV4 {
			if r.prefix.Contains(ip) {
				return fmt.Errorf("%w: %s is %s", ErrBlocked, orig, r.why)
			}
		}
		return nil
	}
	for _, r := range blockedV6 {
		if r.prefix.Contains(ip) {
			return fmt.Errorf("%w: %s is %s", ErrBlocked, orig, r.why)
		}
	}
	b := ip.As16()
	var inner netip.Addr
	switch {
	case nat64.Contains(ip):
		inner = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	case sixToFour.Contains(ip):
		inner = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	default:
		return nil
	}
	if err := Check(inner); err != nil {
		return fmt.Errorf("%w: %s embeds %s", ErrBlocked, orig, inner)
	}
	return nil
}

// HostIP returns the address a URL host denotes when it is an IP
// literal in any spelling a resolver might accept: an IPv6 literal (with or
// without a zone), dotted decimal, or the inet_aton forms — one to four
// parts, each decimal, octal (leading 0) or hexadecimal (0x), the last part
// filling the remaining bytes (2130706433, 0177.0.0.1, 0x7f.1, 127.1). A
// trailing dot is ignored. ok is false for a host name.
//
// numeric is true when the host looks numeric (digits, dots and x only)
// but is not a valid address (e.g. 999.1.1.1): such a host is refused
// rather than handed to a resolver that might read it some other way.
func HostIP(host string) (ip netip.Addr, ok, numeric bool) {
	if host == "" {
		return netip.Addr{}, false, false
	}
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, false, true
		}
		return a, true, true
	}
	h := strings.TrimSuffix(host, ".")
	if h == "" || !looksNumeric(h) {
		return netip.Addr{}, false, false
	}
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false, true
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, good := parseInetPart(p)
		if !good {
			return netip.Addr{}, false, true
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false, true
		}
		n |= vals[i] << (8 * (3 - uint(i)))
	}
	if max := uint64(1)<<(8*(4-uint(last))) - 1; vals[last] > max {
		return netip.Addr{}, false, true
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true, true
}

// looksNumeric: every dot-separated part starts with a digit. A resolver
// would not treat such a name as a DNS name worth looking up (no top-level
// domain starts with a digit), and inet_aton would try to parse it.
func looksNumeric(h string) bool {
	for _, p := range strings.Split(h, ".") {
		if p == "" || p[0] < '0' || p[0] > '9' {
			return false
		}
	}
	return true
}

func parseInetPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" { // glibc reads "0x" as 0
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	v, err := strconv.ParseUint(p, base, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}

// Allowlist holds names, addresses and prefixes that may be reached even
// though Check refuses them, on any port or on the one port named. The
// zero value allows nothing.
type Allowlist struct {
	entries []allowEntry
}

type allowEntry struct {
	name   string       // lower-case host name without trailing dot, or ""
	prefix netip.Prefix // valid when the entry is an address or a CIDR
	port   string       // "" for any port
}

// ParseAllowlist reads allowlist entries: a host name
// ("intranet.example", matched as written in the URL, case-insensitively),
// a host:port ("127.0.0.1:8080", "[::1]:8080", "intranet.example:8443"), an
// address ("10.1.2.3") or a CIDR ("10.0.0.0/8"). Empty entries are skipped.
func ParseAllowlist(list []string) (Allowlist, error) {
	var al Allowlist
	for _, raw := range list {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		var e allowEntry
		if p, err := netip.ParsePrefix(s); err == nil {
			e.prefix = p.Masked()
			al.entries = append(al.entries, e)
			continue
		}
		host := s
		h, port, err := splitHostPortLoose(s)
		if err != nil {
			return Allowlist{}, fmt.Errorf("allow entry %q: %w", raw, err)
		}
		if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return Allowlist{}, fmt.Errorf("allow entry %q: bad port", raw)
			}
			host, e.port = h, port
		}
		host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
		if host == "" {
			return Allowlist{}, fmt.Errorf("allow entry %q: no host", raw)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			a = a.WithZone("").Unmap()
			e.prefix = netip.PrefixFrom(a, a.BitLen())
		} else if strings.ContainsAny(host, "/:[] ") {
			return Allowlist{}, fmt.Errorf("allow entry %q: not a host, host:port, address or CIDR", raw)
		} else {
			e.name = strings.ToLower(host)
		}
		al.entries = append(al.entries, e)
	}
	return al, nil
}

// splitHostPortLoose splits "host:port" and "[v6]:port"; a bare IPv6
// address or a host without a port gives port "".
func splitHostPortLoose(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		i := strings.LastIndex(s, "]")
		if i < 0 {
			return "", "", fmt.Errorf("missing ]")
		}
		host, rest := s[1:i], s[i+1:]
		if rest == "" {
			return host, "", nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", fmt.Errorf("junk after ]")
		}
		return host, rest[1:], nil
	}
	if strings.Count(s, ":") == 1 {
		i := strings.IndexByte(s, ':')
		return s[:i], s[i+1:], nil
	}
	return s, "", nil
}

// Allows reports whether an entry names the host (as written in the URL,
// lower-cased) or covers the address, on this port.
func (al Allowlist) Allows(host string, ip netip.Addr, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ip = ip.WithZone("").Unmap()
	for _, e := range al.entries {
		if e.port != "" && e.port != port {
			continue
		}
		if e.name != "" && e.name == host {
			return true
		}
		if e.prefix.IsValid() && ip.IsValid() && e.prefix.Contains(ip) {
			return true
		}
	}
	return false
}
