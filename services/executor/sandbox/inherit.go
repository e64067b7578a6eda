package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// closeInherited closes every descriptor above stderr that this process
// did not open itself: whatever the executor's own parent left open
// without close-on-exec (a socket, a listening socket, a file) crossed
// the exec into this process. Everything the Go runtime and this program
// open is close-on-exec, so "no FD_CLOEXEC" tells the inherited ones
// apart. It returns how many it closed.
func closeInherited() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("list open descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("list open descriptors: %w", err)
	}
	n := 0
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if err := unix.Close(fd); err == nil {
			n++
		}
	}
	return n, nil
}

// MarkInheritedCloseOnExec marks every descriptor above stderr of this
// process close-on-exec. The executor calls it at start, so that nothing
// its own parent leaked reaches anything it starts (the sandboxed child
// closes such descriptors again itself, see closeInherited).
func MarkInheritedCloseOnExec() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

const (
	sessionKeyringName = "agentmesh-sandbox"
	// Possessor: everything; owner: view, read, search (so that the other
	// threads find it by name).
	keyringPerm = 0x3f000000 | 0x00010000 | 0x00020000 | 0x00080000
)

// newSessionKeyring gives every thread of this process a new, empty,
// anonymous session keyring: the one inherited from the executor (and
// the keys in it, which a process possesses and so may read whatever
// user it runs as) is out of reach of everything this process starts.
// Keyrings belong to threads' credentials, so every thread joins one.
//
// The all-threads call needs the same result on every thread, so the
// keyring is made first (named, in this thread's keyring, in the sandbox's
// new user namespace where no other can have that name yet) and made
// searchable by its owner; then every thread joins it by name.
func newSessionKeyring() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id, err := unix.AddKey("keyring", sessionKeyringName, nil, unix.KEY_SPEC_THREAD_KEYRING)
	if errors.Is(err, unix.ENOSYS) {
		return nil // a kernel without keys has no keyring to leak
	}
	if err != nil {
		return fmt.Errorf("add_key(keyring): %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_SETPERM, uintptr(id), keyringPerm); e != 0 {
		return fmt.Errorf("keyctl(KEYCTL_SETPERM): %w", e)
	}
	name, err := unix.BytePtrFromString(sessionKeyringName)
	if err != nil {
		return err
	}
	if _, _, e := psx.Syscall3(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, uintptr(unsafe.Pointer(name)), 0); e != 0 {
		if e == unix.ENOSYS {
			return nil // a kernel without keys has no keyring to leak
		}
		return fmt.Errorf("keyctl(KEYCTL_JOIN_SESSION_KEYRING): %w", e)
	}
	return nil
}
