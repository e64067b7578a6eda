package netguard

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		addr string
		ok   bool
	}{
		{"8.8.8.8", true},
		{"93.184.216.34", true},
		{"2606:4700:4700::1111", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::808:808", true},
		{"2002:808:808::1", true},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"10.0.0.1", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.0.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"0.0.0.0", false},
		{"255.255.255.255", false},
		{"224.0.0.251", false},
		{"::", false},
		{"::1", false},
		{"::127.0.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:10.0.0.1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"fc00::1", false},
		{"fd00:ec2::254", false},
		{"ff02::1", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b:1::1", false},
		{"2002:7f00:1::", false},
		{"2002:a9fe:a9fe::", false},
		{"2001::1", false},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			err := Check(netip.MustParseAddr(tc.addr))
			if got := err == nil; got != tc.ok {
				t.Errorf("Check(%s) = %v, want allowed=%v", tc.addr, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBlocked) {
				t.Errorf("Check(%s) = %v, want it to wrap ErrBlocked", tc.addr, err)
			}
		})
	}
}

func TestHostIP(t *testing.T) {
	cases := []struct {
		host    string
		want    string // "" when not an address
		numeric bool
	}{
		{"2130706433", "127.0.0.1", true},
		{"0177.0.0.1", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"0X7F.0.0.1", "127.0.0.1", true},
		{"127.1", "127.0.0.1", true},
		{"127.0.1", "127.0.0.1", true},
		{"0x7f000001", "127.0.0.1", true},
		{"017700000001", "127.0.0.1", true},
		{"127.0.0.1.", "127.0.0.1", true},
		{"0", "0.0.0.0", true},
		{"0x", "0.0.0.0", true},
		{"169.254.43518", "169.254.169.254", true},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1", true},
		{"fe80::1%eth0", "fe80::1%eth0", true},
		{"999.0.0.1", "", true},
		{"1.2.3.4.5", "", true},
		{"08.0.0.1", "", true},
		{"4294967296", "", true},
		{"example.com", "", false},
		{"1example.com", "", false},
		{"xn--80ak6aa92e.com", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			ip, ok, numeric := HostIP(tc.host)
			got := ""
			if ok {
				got = ip.String()
			}
			if got != tc.want || numeric != tc.numeric {
				t.Errorf("HostIP(%q) = %q numeric=%v, want %q numeric=%v", tc.host, got, numeric, tc.want, tc.numeric)
			}
		})
	}
}

// FuzzCheck checks Check against the standard library's own classes: an
// address Check lets through is never loopback, private, link-local,
// multicast or unspecified, in any IPv6 spelling of an IPv4 address.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:10.0.0.1", "8.8.8.8", "fe80::1", "64:ff9b::7f00:1", "2002:c0a8:101::"} {
		a := netip.MustParseAddr(s).As16()
		f.Add(a[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a netip.Addr
		switch len(b) {
		case 4:
			a = netip.AddrFrom4([4]byte(b))
		case 16:
			a = netip.AddrFrom16([16]byte(b))
		default:
			return
		}
		if Check(a) != nil {
			return
		}
		for _, x := range []netip.Addr{a, a.Unmap()} {
			if x.IsLoopback() || x.IsPrivate() || x.IsLinkLocalUnicast() || x.IsLinkLocalMulticast() ||
				x.IsMulticast() || x.IsUnspecified() || x.IsInterfaceLocalMulticast() {
				t.Fatalf("Check(%s) = nil for a non-global address", a)
			}
		}
	})
}

// TestControlRefusesOnItsOwn: the connect-time hook refuses a refused
// address whatever the dial before it decided, and lets an allowlisted
// name's address through.
func TestControlRefusesOnItsOwn(t *testing.T) {
	g, err := New([]string{"allowed.test"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"127.0.0.1:8080", "169.254.169.254:80", "[::1]:80", "10.0.0.1:443"} {
		if err := g.control(context.Background(), "tcp", addr, nil); !errors.Is(err, ErrBlocked) {
			t.Errorf("control(%s) = %v, want %v", addr, err, ErrBlocked)
		}
	}
	ctx := context.WithValue(context.Background(), hostKey{}, "allowed.test")
	if err := g.control(ctx, "tcp", "127.0.0.1:8080", nil); err != nil {
		t.Errorf("control(allowlisted name) = %v, want nil", err)
	}
	if err := g.control(context.Background(), "tcp", "93.184.216.34:443", nil); err != nil {
		t.Errorf("control(public) = %v, want nil", err)
	}
}
