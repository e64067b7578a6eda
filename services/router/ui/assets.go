package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"
)

// embedded holds the front end (static/: the ES modules, the style sheet,
// the icon) and the server's page templates (templates/).
//
//go:embed static templates
var embedded embed.FS

// assets serves static/ at /ui/static/<version>/ (version: a hash of all
// the files) as immutable — a browser that has a file never asks for it
// again, and a new binary's pages name a new version — and at /ui/static/
// with a strong ETag per file (revalidated: 304 until the file changes).
type assets struct {
	files   map[string]asset // by path under static/
	version string
	modules []string // the ES modules, for the shell's modulepreload links
}

type asset struct {
	body  []byte
	etag  string
	ctype string
}

func newAssets() (*assets, error) {
	a := &assets{files: map[string]asset{}}
	err := fs.WalkDir(embedded, "static", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := embedded.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		a.files[strings.TrimPrefix(p, "static/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ct}
		return nil
	})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(a.files))
	for n := range a.files {
		names = append(names, n)
	}
	sort.Strings(names)
	all := sha256.New()
	for _, n := range names {
		all.Write([]byte(n + "\x00" + a.files[n].etag + "\x00"))
		if strings.HasSuffix(n, ".js") {
			a.modules = append(a.modules, n)
		}
	}
	a.version = hex.EncodeToString(all.Sum(nil))[:12]
	return a, nil
}

// base is where the pages load the current files from.
func (a *assets) base() string { return "/ui/static/" + a.version }

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/ui/static/")
	cache := "no-cache"
	if v, rest, ok := strings.Cut(name, "/"); ok && v == a.version {
		name, cache = rest, "public, max-age=31536000, immutable"
	}
	f, ok := a.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("ETag", f.etag)
	h.Set("Cache-Control", cache)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
