package child

// A reusable child (Start.reusable, AGENTMESH_CHILD_REUSE=agent) serves
// several tasks of one org and agent, one after the other. Between two
// tasks it clears what the first left behind, so the second starts as in
// a fresh child of the same sandbox: every other process of its PID
// namespace is killed and reaped (it is that namespace's init, so a
// process a tool left running in the background cannot survive), and
// /workspace, /tmp and /dev/shm — the task disk, the only writable places
// — are emptied. Its conversation and tools are rebuilt from the next
// Start. When any of that fails, it exits and the executor discards it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"golang.org/x/sys/unix"
)

// taskDirs are the writable places a task can leave files in.
var taskDirs = []string{sandbox.SandboxWorkspace, "/tmp", "/dev/shm"}

// nextTask clears what the last task left, says Ready, and reads the next
// Start (io.EOF: the executor closed the child's stdin, it is done).
func nextTask(r *childproto.Reader, w *childproto.Writer) (*childwirev1.Start, error) {
	if err := clearTask(); err != nil {
		return nil, fmt.Errorf("cannot serve another task: %w", err)
	}
	if err := w.Write(&childwirev1.Frame{Kind: &childwirev1.Frame_Ready{Ready: &childwirev1.Ready{}}}); err != nil {
		return nil, fmt.Errorf("send ready: %w", err)
	}
	f, err := readFrame(r)
	if err != nil {
		return nil, err
	}
	start := f.GetStart()
	if start == nil {
		return nil, fmt.Errorf("got %s, want start", childproto.Kind(f))
	}
	return start, nil
}

// clearTask kills every other process of the child's PID namespace and
// empties the task disk. Only the init of a PID namespace (the strict
// sandbox) can be sure to have killed everything: elsewhere it refuses.
func clearTask() error {
	if os.Getpid() != 1 {
		return errors.New("not the init of its own PID namespace (reuse needs the strict sandbox)")
	}
	// kill(-1) from a namespace's init signals every other process in it.
	if err := unix.Kill(-1, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill the task's processes: %w", err)
	}
	for {
		if _, err := unix.Wait4(-1, nil, 0, nil); errors.Is(err, unix.ECHILD) {
			break
		} else if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("reap the task's processes: %w", err)
		}
	}
	for _, d := range taskDirs {
		if err := emptyDir(d); err != nil {
			return err
		}
	}
	return nil
}

// emptyDir removes everything in dir (not dir itself), making directories
// writable first so a tool's chmod cannot keep a file.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("empty %s: %d entries left (%v)", dir, len(left), err)
	}
	return nil
}
