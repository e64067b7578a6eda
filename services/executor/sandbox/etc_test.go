package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCopyPublic: the /etc snapshot copies what every user may read and
// nothing else: world-readable files (mode kept), symlinks as symlinks,
// world-searchable directories; not private files or directories, FIFOs,
// or more than the size bound.
func TestCopyPublic(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("d/public", "pub", 0o644)
	write("d/exec", "#!/bin/sh", 0o755)
	write("d/private", "key", 0o640)
	write("d/secret/in", "hidden", 0o644)
	if err := os.Chmod(filepath.Join(src, "d/secret"), 0o710); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/x", filepath.Join(src, "d/link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "d/fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	budget := int64(maxEtcBytes)
	if err := copyPublic(filepath.Join(src, "d"), filepath.Join(dst, "d"), &budget); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"d/public": "pub", "d/exec": "#!/bin/sh"} {
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", rel, b, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dst, "d/exec")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("d/exec mode: %v, %v; want 0755", st, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "d/link")); err != nil || target != "/usr/share/x" {
		t.Errorf("d/link: %q, %v; want the symlink copied", target, err)
	}
	for _, rel := range []string{"d/private", "d/secret", "d/fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, rel)); !os.IsNotExist(err) {
			t.Errorf("%s copied (lstat: %v): want only what every user may read", rel, err)
		}
	}
	small := int64(2)
	if err := copyPublic(filepath.Join(src, "d/public"), filepath.Join(dst, "again"), &small); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("over the size bound: %v, want an error", err)
	}
}

// TestEtcFor: the snapshot is used only when no task runs as its owner
// (root or subordinate ids) and no operator path reaches into /etc.
func TestEtcFor(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Sandbox
		want string
	}{
		{"root", Sandbox{etc: "/snap", root: true}, "/snap"},
		{"subordinate ids", Sandbox{etc: "/snap", sub: &subordinate{}}, "/snap"},
		{"one uid for all tasks", Sandbox{etc: "/snap"}, ""},
		{"no snapshot", Sandbox{root: true}, ""},
		{"an operator path in /etc", Sandbox{etc: "/snap", root: true, cfg: Config{ReadOnlyPaths: []string{"/opt/x", "/etc/pki"}}}, ""},
		{"operator paths elsewhere", Sandbox{etc: "/snap", root: true, cfg: Config{ReadOnlyPaths: []string{"/etcetera"}}}, "/snap"},
	} {
		if got := c.s.etcFor(); got != c.want {
			t.Errorf("%s: etcFor() = %q, want %q", c.name, got, c.want)
		}
	}
}
