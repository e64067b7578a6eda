package spawner

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/testlog"
	"golang.org/x/sys/unix"
)

// niceOf reads the nice value of one thread from /proc (stat field 19;
// the fields are counted after the command name, which may hold spaces).
func niceOf(t *testing.T, stat string) int {
	t.Helper()
	b, err := os.ReadFile(stat)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(f[16]) // field 19: the 17th after "pid (comm)"
	if err != nil {
		t.Fatalf("%s: %v", stat, err)
	}
	return n
}

// threadNices returns the nice value of every thread of pid.
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, e := range entries {
		tid, _ := strconv.Atoi(e.Name())
		out[tid] = niceOf(t, filepath.Join(dir, e.Name(), "stat"))
	}
	return out
}

// With Nice set, the spawner (every thread of it) and the children it
// start run that many steps below the executor's priority, and the
// executor's own threads keep theirs.
func TestSpawnerAndChildrenRunAtNice(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// This goroutine keeps its thread, so that the spawner's supervisor
	// cannot run on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own := unix.Gettid()
	before, err := unix.Getpriority(unix.PRIO_PROCESS, own)
	if err != nil {
		t.Fatal(err)
	}
	ownNice := 20 - before // the raw syscall returns 20 - nice
	if ownNice >= MaxNice {
		t.Skipf("the test runs at nice %d already", ownNice)
	}
	want := min(ownNice+7, MaxNice)
	c, err := StartWith(exe, testlog.New(t), Options{Nice: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	for tid, n := range threadNices(t, c.Pid()) {
		if n != want {
			t.Errorf("spawner thread %d runs at nice %d, want %d", tid, n, want)
		}
	}
	p := startSleep(t, c)
	defer func() { _ = p.Kill(); _, _ = p.Wait() }()
	if n := niceOf(t, filepath.Join("/proc", strconv.Itoa(p.Pid), "stat")); n != want {
		t.Errorf("child runs at nice %d, want %d", n, want)
	}
	// The executor keeps its priority: only the thread that supervises
	// the spawner (locked to it, it only waits) runs lower.
	if n := niceOf(t, filepath.Join("/proc/self/task", strconv.Itoa(own), "stat")); n != ownNice {
		t.Errorf("the executor's thread runs at nice %d, want %d (unchanged)", n, ownNice)
	}
}

// A nice value Linux does not have is refused before anything starts.
func TestStartWithRefusesBadNice(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, MaxNice + 1} {
		if c, err := StartWith(exe, testlog.New(t), Options{Nice: n}); err == nil {
			c.Close()
			t.Errorf("nice %d accepted", n)
		}
	}
}
