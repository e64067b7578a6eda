package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// A host uid per task when the executor is not root: subordinate ids.
//
// An ordinary user may not map another host uid into a user namespace
// itself; the setuid helpers newuidmap and newgidmap (Debian package
// uidmap) map, for a process of the user, ids of the user's subordinate
// ranges (/etc/subuid, /etc/subgid). Each running task takes one pair
// (the n-th subordinate uid and the n-th subordinate gid) and its
// sandbox's root is mapped to it, alone: the executor's own ids are not
// mapped in the task's namespace, so a task can neither act as the
// executor nor as another task (chmod, utime, setxattr, signals, ptrace
// all fail across tasks).
//
// The order at spawn (Task.Command, Task.Start, Enter): the child starts
// in its new namespaces without a mapping, keeping its capabilities in
// its namespace across exec as ambient ones, and blocks on a sync pipe;
// the executor runs newuidmap and newgidmap on its pid (MapIDs) and then
// releases it; the child becomes root of its namespace (the subordinate
// ids) and only then confines itself and speaks to the executor. A child
// whose executor could not map it reads EOF and exits without running
// anything.

// subordinate is the subordinate id ranges an unprivileged executor maps
// tasks to, and the helpers that write the maps.
type subordinate struct {
	uids, gids           IDRange
	newuidmap, newgidmap string
}

// maxSubIDs bounds how many ids of the ranges are used (one per running
// task; 65536 is the size useradd hands out).
const maxSubIDs = 65536

// parseSubIDs reads an /etc/subuid or /etc/subgid file ("name:first:count"
// lines; the owner is a user name or a numeric id) and returns the first
// range that belongs to the user, by name or id. Malformed lines are
// skipped, as shadow's tools skip them.
func parseSubIDs(r io.Reader, name string, id int) (IDRange, bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	ids := strconv.Itoa(id)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 3 || (f[0] != name && f[0] != ids) || f[0] == "" {
			continue
		}
		first, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || first == 0 || count == 0 || first+count > 1<<32-1 {
			continue
		}
		return IDRange{First: int(first), Count: int(min(count, maxSubIDs))}, true
	}
	return IDRange{}, false
}

// findSubordinate finds the executor's subordinate ranges and the helpers,
// or says what is missing and how to get it.
func findSubordinate() (*subordinate, error) {
	uid, gid := os.Geteuid(), os.Getegid()
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	how := fmt.Sprintf("give user %s a subordinate range (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s, or a line %s:100000:65536 in /etc/subuid and /etc/subgid) and install the setuid helpers newuidmap and newgidmap (apt-get install uidmap)", name, name, name)
	s := &subordinate{}
	var miss []string
	for _, f := range []struct {
		path string
		dst  *IDRange
	}{{"/etc/subuid", &s.uids}, {"/etc/subgid", &s.gids}} {
		fh, err := os.Open(f.path)
		if err != nil {
			miss = append(miss, fmt.Sprintf("%s: %v", f.path, errors.Unwrap(err)))
			continue
		}
		r, ok := parseSubIDs(fh, name, uid)
		fh.Close()
		if !ok {
			miss = append(miss, fmt.Sprintf("no range for %s in %s", name, f.path))
			continue
		}
		*f.dst = r
	}
	for _, h := range []struct {
		name string
		dst  *string
	}{{"newuidmap", &s.newuidmap}, {"newgidmap", &s.newgidmap}} {
		p, err := exec.LookPath(h.name)
		if err != nil {
			for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin"} {
				if _, e := os.Stat(dir + "/" + h.name); e == nil {
					p, err = dir+"/"+h.name, nil
					break
				}
			}
		}
		if err != nil {
			miss = append(miss, h.name+" not found")
			continue
		}
		*h.dst = p
	}
	if len(miss) > 0 {
		return nil, fmt.Errorf("%s — %s", strings.Join(miss, ", "), how)
	}
	if s.uids.First <= uid && uid < s.uids.First+s.uids.Count || s.gids.First <= gid && gid < s.gids.First+s.gids.Count {
		return nil, fmt.Errorf("the subordinate ranges of %s (uids %s, gids %s) hold its own ids — %s", name, s.uids, s.gids, how)
	}
	return s, nil
}

// pool is the pairs of subordinate ids: the n-th uid with the n-th gid.
func (s *subordinate) pool() *uidPool {
	return newUIDPool(IDRange{First: s.uids.First, Count: min(s.uids.Count, s.gids.Count)})
}

// gidOf is the subordinate gid paired with the subordinate uid.
func (s *subordinate) gidOf(uid int) int { return s.gids.First + uid - s.uids.First }

// MapsByHelper reports whether the task's id maps are written by the
// setuid helpers (subordinate ids, the executor is not root): then the
// child must be started without UidMappings and Credential, with
// AmbientCaps and a sync pipe (as Command does), and MapIDs must run
// after the start and before the child is released (MapAndRelease). A
// spawner of its own (a fork server) does the same.
func (t *Task) MapsByHelper() bool { return t.sub }

// MapIDs maps the task's sandbox root (uid and gid 0 of the namespace of
// the process pid) to the task's host ids with newuidmap and newgidmap.
// Only for a task whose MapsByHelper is true.
func (t *Task) MapIDs(pid int) error {
	sub := t.sb.sub
	if !t.sub || sub == nil {
		return errors.New("sandbox: this task's ids are not mapped by the helpers")
	}
	for _, m := range []struct {
		helper string
		id     int
	}{{sub.newuidmap, t.uid}, {sub.newgidmap, t.gid}} {
		cmd := exec.Command(m.helper, strconv.Itoa(pid), "0", strconv.Itoa(m.id), "1")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("sandbox: %s %d 0 %d 1: %v: %s", m.helper, pid, m.id, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// MapAndRelease maps the task's ids for the child pid started from
// Command (MapIDs) and then releases it (the byte on its sync pipe); on
// error the pipe is closed without one, and the child exits without
// running anything. A spawner of its own calls it where Task.Start does:
// after the child is in its cgroups, before anything is sent to it.
func (t *Task) MapAndRelease(pid int) error {
	if err := t.MapIDs(pid); err != nil {
		_ = t.release(false)
		return err
	}
	if err := t.release(true); err != nil {
		return fmt.Errorf("sandbox: release the child: %w", err)
	}
	return nil
}

// release tells a child started for helper maps that its maps are written
// (a byte on the sync pipe; closing it without one makes the child exit).
func (t *Task) release(ok bool) error {
	if t.syncW == nil {
		return nil
	}
	var err error
	if ok {
		_, err = t.syncW.Write([]byte{1})
	}
	_ = t.syncW.Close()
	t.syncW = nil
	return err
}

// AmbientCaps are the capabilities a child started for helper maps keeps
// across exec (ambient), as root of its namespace would have them: all
// (a new user namespace's first process has the full set there, whatever
// the executor's bounding set). A spawner starting such a child sets them
// itself.
func AmbientCaps() []uintptr {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 64 {
			last = n
		}
	}
	out := make([]uintptr, 0, last+1)
	for c := 0; c <= last; c++ {
		out = append(out, uintptr(c))
	}
	return out
}

// becomeRoot is the child's side of helper maps (Enter's first step): it
// waits until the executor has written its maps (one byte on fd), then
// becomes root of its namespace — the task's subordinate ids — on every
// thread and drops the executor's supplementary groups where setgroups is
// allowed. (The inheritable capabilities it was started with are cleared
// by dropCapabilities: psx finds the threads in /proc, which names them
// right only once the sandbox's own /proc is mounted.)
func becomeRoot(fd int) error {
	var b [1]byte
	n, err := unix.Read(fd, b[:])
	_ = unix.Close(fd)
	if err != nil || n != 1 || b[0] != 1 {
		return fmt.Errorf("the executor did not map this sandbox's ids (read %d bytes: %v)", n, err)
	}
	if err := syscall.Setgroups(nil); err != nil && !errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("setresgid 0: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("setresuid 0: %w", err)
	}
	return nil
}

// clearInheritable empties the inheritable capabilities of every thread
// (a child started for helper maps got them with its ambient ones), so
// that no file's inheritable capabilities can give a program anything.
// It needs the sandbox's own /proc (psx lists the threads there).
func clearInheritable() error {
	// Heap values: they do not move while the other threads read them.
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	_, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	if e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}
