package localtools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Limits of the fs tools.
const (
	// DefaultReadBytes is what fs_read returns when max_bytes is not set.
	DefaultReadBytes = 128 << 10
	// MaxListEntries bounds fs_list's answer.
	MaxListEntries = 2000
)

// openWorkspace resolves a path given by the model against the workspace
// and opens the workspace as an os.Root, which refuses any step (a "..",
// a symbolic link) that leads outside it. It returns the cleaned
// relative path ("." for the workspace itself).
func openWorkspace(tool string, env tools.Env, p string, allowRoot bool) (*os.Root, string, error) {
	clean, err := relPath(p, allowRoot)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", tool, err)
	}
	ws, err := workspace(env)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", tool, err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, "", fmt.Errorf("%s: open the workspace: %w", tool, err)
	}
	return root, clean, nil
}

// relPath checks a path given by the model: relative, staying inside.
func relPath(p string, allowRoot bool) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path %q contains a NUL byte", tools.ErrInvalidArguments, p)
	}
	if filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: path %q is absolute; give a path relative to the workspace", ErrOutsideWorkspace, p)
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: path %q climbs out of the workspace", ErrOutsideWorkspace, p)
	}
	if c == "." && !allowRoot {
		return "", fmt.Errorf("%w: path %q names the workspace itself, not a file", tools.ErrInvalidArguments, p)
	}
	return c, nil
}

// fsError turns an error of an os.Root operation into one for the model.
func fsError(tool, p string, err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%s: %w: path %q leads outside the workspace through a symbolic link (links must be relative and stay inside)", tool, ErrOutsideWorkspace, p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %q does not exist", tool, p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: %q: permission denied", tool, p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %q: %s failed: %v", tool, p, pe.Op, pe.Err)
	}
	return fmt.Errorf("%s: %q: %v", tool, p, err)
}

type readArgs struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset"`
	MaxBytes int64  `json:"max_bytes"`
}

func fsRead(_ context.Context, env tools.Env, raw json.RawMessage) (string, error) {
	var a readArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("fs_read: %w: %w", tools.ErrInvalidArguments, err)
	}
	root, p, err := openWorkspace("fs_read", env, a.Path, false)
	if err != nil {
		return "", err
	}
	defer root.Close()
	// O_NONBLOCK: opening a FIFO (or a device) must not wait for a
	// writer; anything but a regular file is refused below.
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fsError("fs_read", a.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fsError("fs_read", a.Path, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("fs_read: %q is a directory; use fs_list", a.Path)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("fs_read: %q is not a regular file", a.Path)
	}
	n := a.MaxBytes
	if n <= 0 {
		n = DefaultReadBytes
	}
	buf := make([]byte, min(n, max(fi.Size()-a.Offset, 0)))
	got, err := f.ReadAt(buf, a.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fsError("fs_read", a.Path, err)
	}
	out := text(buf[:got])
	if end := a.Offset + int64(got); end < fi.Size() || a.Offset > 0 {
		out += fmt.Sprintf("\n[%q has %d bytes; this is bytes %d to %d", a.Path, fi.Size(), a.Offset, end)
		if end < fi.Size() {
			out += fmt.Sprintf("; read on with offset %d", end)
		}
		out += "]"
	}
	return out, nil
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Append  bool   `json:"append"`
}

func fsWrite(_ context.Context, env tools.Env, raw json.RawMessage) (string, error) {
	var a writeArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("fs_write: %w: %w", tools.ErrInvalidArguments, err)
	}
	root, p, err := openWorkspace("fs_write", env, a.Path, false)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if dir := filepath.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return "", fsError("fs_write", a.Path, err)
		}
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	verb := "wrote"
	if a.Append {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		verb = "appended"
	}
	if fi, err := root.Lstat(p); err == nil && fi.IsDir() {
		return "", fmt.Errorf("fs_write: %q is a directory", a.Path)
	}
	// O_NONBLOCK: opening a FIFO must not wait for a reader.
	f, err := root.OpenFile(p, flags|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return "", fsError("fs_write", a.Path, err)
	}
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		f.Close()
		return "", fmt.Errorf("fs_write: %q is not a regular file", a.Path)
	}
	_, err = f.WriteString(a.Content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fsError("fs_write", a.Path, err)
	}
	return fmt.Sprintf("%s %d bytes to %s", verb, len(a.Content), p), nil
}

type listArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

func fsList(_ context.Context, env tools.Env, raw json.RawMessage) (string, error) {
	var a listArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("fs_list: %w: %w", tools.ErrInvalidArguments, err)
	}
	if a.Path == "" {
		a.Path = "."
	}
	root, p, err := openWorkspace("fs_list", env, a.Path, true)
	if err != nil {
		return "", err
	}
	defer root.Close()
	// Resolve the directory itself through the root (a link to it must
	// stay inside), then list it without following links.
	sub, err := root.OpenRoot(p)
	if err != nil {
		return "", fsError("fs_list", a.Path, err)
	}
	defer sub.Close()
	fsys := sub.FS()
	var lines []string
	more := false
	add := func(name string, d fs.DirEntry) {
		if len(lines) >= MaxListEntries {
			more = true
			return
		}
		lines = append(lines, describe(sub, name, d))
	}
	if a.Recursive {
		err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				lines = append(lines, fmt.Sprintf("%s: %v", name, err))
				return nil
			}
			if name == "." {
				return nil
			}
			if len(lines) >= MaxListEntries {
				more = true
				return fs.SkipAll
			}
			add(name, d)
			return nil
		})
	} else {
		var ents []fs.DirEntry
		ents, err = fs.ReadDir(fsys, ".")
		for _, e := range ents {
			add(e.Name(), e)
		}
	}
	if err != nil {
		return "", fsError("fs_list", a.Path, err)
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return fmt.Sprintf("%s is empty", p), nil
	}
	out := strings.Join(lines, "\n")
	if more {
		out += fmt.Sprintf("\n[more entries not shown: the list stops at %d]", MaxListEntries)
	}
	return out, nil
}

func describe(r *os.Root, name string, d fs.DirEntry) string {
	switch {
	case d.IsDir():
		return name + "/"
	case d.Type()&fs.ModeSymlink != 0:
		if t, err := r.Readlink(name); err == nil {
			return name + " -> " + t
		}
		return name + " (symbolic link)"
	}
	if fi, err := d.Info(); err == nil {
		if fi.Mode().IsRegular() {
			return fmt.Sprintf("%s (%d bytes)", name, fi.Size())
		}
		return fmt.Sprintf("%s (%s)", name, fi.Mode().Type())
	}
	return name
}
