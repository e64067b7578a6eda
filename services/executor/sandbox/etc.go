package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The sandbox's /etc is a snapshot the executor takes once, when it
// starts (New), under its workspace root: the generated files
// (generatedEtc) and the part of each etcEntries entry that every user of
// the host may read. Each sandbox binds it read-only at /etc — one bind
// instead of a bind and a read-only remount per entry (~20 entries on a
// Debian host: ~40 mount calls per child, ~10% of a spawn; see
// docs/benchmarks.md).
//
// What a task sees is the same as with the per-entry binds: a task's root
// is a host uid of its own, so it could read only what is world-readable
// anyway, and that is what is copied (files o+r, directories o+rx;
// symlinks as symlinks; devices, FIFOs and sockets never). What differs:
// a change to the host's /etc after the executor started (new CA
// certificates, another time zone) reaches the sandboxes when the
// executor restarts. A task cannot change the snapshot: it is bound
// read-only, owned by the executor's uid — never a task's, which is why
// it is used only as root or with subordinate ids (Sandbox.etcFor) — and
// the sandbox can neither remount nor write outside its workspace.

// maxEtcBytes bounds the snapshot: a host /etc entry larger than this
// (all of them together) is a misconfiguration, not something to copy.
const maxEtcBytes = 64 << 20

// buildEtc writes the snapshot to dst (replacing what is there).
func buildEtc(dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("sandbox /etc snapshot: %w", err)
	}
	if err := mkdirMode(dst, 0o755); err != nil {
		return fmt.Errorf("sandbox /etc snapshot: %w", err)
	}
	for name, content := range generatedEtc {
		if err := writeMode(filepath.Join(dst, name), strings.NewReader(content), 0o644); err != nil {
			return fmt.Errorf("sandbox /etc snapshot: %w", err)
		}
	}
	budget := int64(maxEtcBytes)
	for _, name := range etcEntries {
		if err := copyPublic(filepath.Join("/etc", name), filepath.Join(dst, name), &budget); err != nil {
			return fmt.Errorf("sandbox /etc snapshot of /etc/%s: %w", name, err)
		}
	}
	return nil
}

// copyPublic copies what every user may read of src to dst: symlinks as
// they are, world-readable files, and world-readable and searchable
// directories with what of their contents is, in turn.
func copyPublic(src, dst string, budget *int64) error {
	st, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	m := st.Mode()
	switch {
	case m&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case m.IsDir():
		if m.Perm()&0o005 != 0o005 {
			return nil
		}
		if err := mkdirMode(dst, m.Perm()); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := copyPublic(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), budget); err != nil {
				return err
			}
		}
		return nil
	case m.IsRegular():
		if m.Perm()&0o004 == 0 {
			return nil
		}
		if *budget -= st.Size(); *budget < 0 {
			return fmt.Errorf("%s: the snapshot would exceed %d MiB", src, maxEtcBytes>>20)
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		return writeMode(dst, f, m.Perm())
	}
	return nil // a device, FIFO or socket: never in the sandbox
}

func mkdirMode(dir string, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil {
		return err
	}
	return os.Chmod(dir, perm) // the umask may have cleared bits
}

func writeMode(path string, r io.Reader, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// etcFor is the snapshot a task's sandbox binds at /etc, "" for the
// per-entry binds: when tasks run as the executor's own uid (which owns
// the snapshot), and when the operator's read-only paths reach into /etc
// (their binds need mount points the snapshot does not have).
func (s *Sandbox) etcFor() string {
	if s.etc == "" || !(s.root || s.sub != nil) {
		return ""
	}
	for _, p := range s.cfg.ReadOnlyPaths {
		if p == "/etc" || strings.HasPrefix(p, "/etc/") {
			return ""
		}
	}
	return s.etc
}
