package sandbox

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter every sandboxed process carries (installed by Enter on
// all its threads, inherited by everything it starts). It is small and
// hand-written (no libseccomp, no cgo) and stops what the namespaces do
// not scope:
//
//   - socket(2) and socketpair(2) of any address family but AF_UNIX,
//     AF_INET, AF_INET6 and AF_NETLINK fail with EAFNOSUPPORT: AF_VSOCK
//     reaches the hypervisor and other VMs from any network namespace;
//     AF_PACKET, AF_BLUETOOTH, AF_CAN, AF_RDS, AF_TIPC, AF_XDP, AF_ALG and
//     the rest are attack surface no tool needs.
//   - io_uring_setup(2) fails with ENOSYS: io_uring creates sockets
//     (IORING_OP_SOCKET) and does I/O without passing through the
//     filter above.
//   - A syscall of another ABI (x32 on amd64, i386) fails with ENOSYS,
//     resp. kills the process: their numbers would pass the checks
//     above unseen.
//
// Everything else is allowed (the rest of the walls stop it).

// Allowed socket families.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

const (
	seccompSetModeFilter   = 1
	seccompFilterFlagTsync = 1

	seccompRetKillProcess = 0x80000000
	seccompRetErrno       = 0x00050000
	seccompRetAllow       = 0x7fff0000

	// struct seccomp_data offsets.
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on a little-endian machine (both arches built)
)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// seccompProgram builds the filter for this architecture.
func seccompProgram() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, errSeccompArch
	}
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		errn = seccompRetErrno
	)
	p := []unix.SockFilter{
		stmt(ldW, offArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, seccompRetKillProcess),
		stmt(ldW, offNr),
	}
	if x32Bit != 0 {
		p = append(p,
			jump(jge, x32Bit, 0, 1),
			stmt(ret, errn|uint32(unix.ENOSYS)),
		)
	}
	// Families: allow → jump to ALLOW, else EAFNOSUPPORT.
	fam := []unix.SockFilter{stmt(ldW, offArg0)}
	for i, f := range allowedFamilies {
		// jt: skip the remaining family checks and the refusal.
		fam = append(fam, jump(jeq, f, uint8(len(allowedFamilies)-i), 0))
	}
	fam = append(fam, stmt(ret, errn|uint32(unix.EAFNOSUPPORT)), stmt(ret, seccompRetAllow))
	p = append(p,
		jump(jeq, uint32(unix.SYS_IO_URING_SETUP), 0, 1),
		stmt(ret, errn|uint32(unix.ENOSYS)),
		jump(jeq, uint32(unix.SYS_SOCKET), 2, 0),
		jump(jeq, uint32(unix.SYS_SOCKETPAIR), 1, 0),
		stmt(ret, seccompRetAllow),
	)
	return append(p, fam...), nil
}

var errSeccompArch = errors.New("seccomp: the socket-family filter is not built for this architecture (amd64 and arm64 are)")

// installSeccomp installs the filter on every thread of this process
// (SECCOMP_FILTER_FLAG_TSYNC). no_new_privs must be set already.
func installSeccomp() error {
	prog, err := seccompProgram()
	if err != nil {
		return err
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFilterFlagTsync, uintptr(unsafe.Pointer(&fp)))
	switch {
	case errno != 0:
		return fmt.Errorf("seccomp: %w", errno)
	case r != 0:
		return fmt.Errorf("seccomp: thread %d could not be synchronised", r)
	}
	return nil
}
