package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The filesystem a strict sandbox sees is built from nothing (buildRoot,
// run by Enter as root of the new user and mount namespaces): a tmpfs
// becomes the root, and in it only
//
//	/usr /bin /sbin /lib* and the operator's paths   read-only binds of the host's
//	/etc              a few generated files (passwd, group, hosts, hostname)
//	                  and what programs read (etcEntries): one read-only bind
//	                  of the executor's snapshot of them (etc.go), or a bind
//	                  per entry without one
//	/dev              null zero full random urandom (binds), fd stdin stdout
//	                  stderr (symlinks), shm (task disk)
//	/proc             a fresh procfs of the task's PID namespace
//	/tmp, /workspace  the task disk: one tmpfs of Config.Disk bytes
//	/.sandbox         the tools' cgroup files (see Confinement.ToolProcs)
//
// The root itself is remounted read-only. Nothing else of the host exists
// in it: not /run, /var, /home, /root, /sys, /mnt, the host's /tmp, the
// executor's data directory, other tasks' workspaces — so no host unix
// socket, file or directory can even be named.

// Paths inside the sandbox.
const (
	// SandboxWorkspace is the task's workspace as the sandbox sees it.
	SandboxWorkspace = "/workspace"
	sandboxMeta      = "/.sandbox"
)

// rootSystemPaths are bound read-only at the same place (a symlink, as
// /bin on a merged-/usr system, is copied as a symlink).
var rootSystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcEntries are the parts of the host's /etc that programs read; each is
// bound read-only when it exists (or copied, if a symlink).
var etcEntries = []string{
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
	"nsswitch.conf", "host.conf", "gai.conf", "protocols", "services", "mime.types", "magic",
	"ssl", "ca-certificates", "ca-certificates.conf", "os-release", "debian_version",
	"lsb-release", "bash.bashrc", "profile", "inputrc", "terminfo", "python3", "perl",
}

// generatedEtc are written, not bound: the host's user list and names stay
// on the host.
var generatedEtc = map[string]string{
	"passwd":   "root:x:0:0:sandbox:" + SandboxWorkspace + ":/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"group":    "root:x:0:\nnogroup:x:65534:\n",
	"hostname": "sandbox\n",
	"hosts":    "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
}

var devices = []string{"null", "zero", "full", "random", "urandom"}

// buildRoot builds the sandbox's filesystem on the mount point stage (an
// empty directory of the host) and makes it the root (pivot_root), then
// enters the workspace. It rewrites p's tool cgroup paths to where the
// sandbox sees them. Call it as root of fresh user and mount namespaces,
// with mounts already private.
func buildRoot(p *params) error {
	r := p.Stage
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("mount the root tmpfs on %s: %w", r, err)
	}
	for _, step := range []func(r string, p *params) error{mountDisk, bindSystem, mountDev, bindToolCgroups} {
		if err := step(r, p); err != nil {
			return err
		}
	}
	return pivot(r)
}

// mountDisk mounts the task disk: workspace, /tmp and /dev/shm share one
// tmpfs of p.Disk bytes.
func mountDisk(r string, p *params) error {
	disk := filepath.Join(r, ".disk")
	if err := os.Mkdir(disk, 0o700); err != nil {
		return err
	}
	inodes := max(p.Disk/4096, 4096)
	if err := unix.Mount("tmpfs", disk, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d", p.Disk, inodes)); err != nil {
		return fmt.Errorf("mount the task disk (tmpfs of %d bytes): %w", p.Disk, err)
	}
	for _, d := range []struct {
		sub, at string
		mode    os.FileMode
	}{
		{"workspace", SandboxWorkspace, 0o700},
		{"tmp", "/tmp", 0o1777},
		{"shm", "/dev/shm", 0o1777},
	} {
		src := filepath.Join(disk, d.sub)
		if err := os.Mkdir(src, 0); err != nil {
			return err
		}
		if err := os.Chmod(src, d.mode); err != nil { // the umask would clear the sticky bit
			return err
		}
		if err := bind(src, filepath.Join(r, d.at), false, true); err != nil {
			return err
		}
	}
	if err := unix.Unmount(disk, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the task disk's staging point: %w", err)
	}
	_ = os.Remove(disk)
	return nil
}

// bindSystem binds the host's system paths, /etc and the extra read-only
// paths.
func bindSystem(r string, p *params) error {
	for _, path := range rootSystemPaths {
		if err := bindHost(r, path, true); err != nil {
			return err
		}
	}
	if err := buildRootEtc(r, p.Etc); err != nil {
		return err
	}
	for _, path := range p.ReadOnly {
		if covered(path, p.ReadOnly) {
			continue
		}
		if err := bindHost(r, path, false); err != nil {
			return err
		}
	}
	return nil
}

// mountDev makes /dev (the harmless devices and the fd links) and a fresh
// /proc of the task's PID namespace.
func mountDev(r string, _ *params) error {
	dev := filepath.Join(r, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	for _, d := range devices {
		if err := bind("/dev/"+d, filepath.Join(dev, d), false, false); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	proc := filepath.Join(r, "proc")
	if err := os.Mkdir(proc, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /proc in the PID namespace: %w (a /proc partly hidden by other mounts, as in some containers, forbids it)", err)
	}
	return nil
}

// bindToolCgroups binds the tools' cgroup files at fixed paths and
// rewrites p's paths to where the sandbox sees them.
func bindToolCgroups(r string, p *params) error {
	meta := filepath.Join(r, sandboxMeta)
	if err := os.Mkdir(meta, 0o755); err != nil {
		return err
	}
	for i, f := range p.ToolProcs {
		at := fmt.Sprintf("%s/cgroup-%d.procs", sandboxMeta, i)
		if err := bind(f, filepath.Join(r, at), false, false); err != nil {
			return err
		}
		p.ToolProcs[i] = at
	}
	if p.ToolOOM != "" {
		at := sandboxMeta + "/tools.events"
		if err := bind(p.ToolOOM, filepath.Join(r, at), true, false); err != nil {
			return err
		}
		p.ToolOOM = at
	}
	return nil
}

// pivot makes r the root: pivot_root(".", "."), the old root ends up
// stacked on the new one and is then detached, with every host mount
// under it; the root is made read-only and the workspace entered.
func pivot(r string) error {
	if err := unix.Chdir(r); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return unix.Chdir(SandboxWorkspace)
}

// buildRootEtc makes the sandbox's /etc under root r: the executor's
// snapshot bound read-only (etc.go), or, without one, the generated files
// and a read-only bind of each host entry.
func buildRootEtc(r, snapshot string) error {
	etc := filepath.Join(r, "etc")
	if snapshot != "" {
		return bind(snapshot, etc, true, false)
	}
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	for name, content := range generatedEtc {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, name := range etcEntries {
		if err := bindHost(r, "/etc/"+name, true); err != nil {
			return err
		}
	}
	return nil
}

// covered reports whether path lies inside one of the system paths or an
// earlier entry of the operator's list (it is bound already).
func covered(path string, list []string) bool {
	for _, s := range append(append([]string(nil), rootSystemPaths...), list...) {
		if s != path && strings.HasPrefix(path, s+"/") {
			return true
		}
	}
	return false
}

// bindHost makes the host's path visible at the same place under root r,
// read-only; a missing path is skipped. A symlink is copied when
// copyLinks (the system paths); otherwise what it points to is bound.
func bindHost(r, path string, copyLinks bool) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dst := filepath.Join(r, path)
	if st.Mode()&os.ModeSymlink != 0 && copyLinks {
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	return bind(path, dst, true, true)
}

// bind bind-mounts src (a directory or a file) on dst, creating dst (and
// its parents) as an empty directory or file; readOnly remounts it
// read-only, nosuid, keeping the source's locked flags.
func bind(src, dst string, readOnly, rec bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if st.IsDir() {
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	} else if err := os.WriteFile(dst, nil, 0o644); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if !readOnly {
		return nil
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dst, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", src, err)
	}
	rf := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID)
	for st, ms := range map[int64]uintptr{
		unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME,
		unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if sfs.Flags&st != 0 {
			rf |= ms
		}
	}
	if err := unix.Mount("", dst, "", rf, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", src, err)
	}
	return nil
}
