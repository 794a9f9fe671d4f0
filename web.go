// web.go — the dashboard embedded in the binary (web/: plain HTML, CSS, ES modules, vendored xterm.js),
// served at GET / with the single-page-app fallback of docs/API.md convention 10.
//
// Entry point: handleDashboard (reached from handleFallback for a GET or HEAD outside /v1).
// Rules (DESIGN §9): an extension-less GET outside /v1 and /health that names no embedded file gets
// index.html, the same bytes as / (deep links); a missing file with an extension is 404 E_ROUTE_NOT_FOUND, never HTML; every file carries
// its own type, a strong ETag and answers 304 to If-None-Match; text assets are sent gzipped to a client
// that accepts gzip (compressed once, on first use); index.html is no-cache so a new binary's page is seen
// at once, assets are revalidated through their ETag. The page holds no data, so it is public even with a
// token. The asset table is built once from the read-only embed.FS and never changes afterwards.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

//go:embed web
var webFiles embed.FS

// webAsset is one embedded file ready to serve.
type webAsset struct {
	body  []byte
	gz    []byte // nil when compressing does not pay (images, tiny files)
	etag  string // strong, of the uncompressed bytes
	ctype string
}

// dashboardAssets is the read-only table of the embedded files, built on first use (a pure function of
// webFiles, so lazily computed rather than mutable state).
var dashboardAssets = sync.OnceValue(func() map[string]*webAsset {
	out := map[string]*webAsset{}
	web, _ := fs.Sub(webFiles, "web")
	fs.WalkDir(web, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(web, p)
		if err != nil {
			return nil
		}
		out[p] = newWebAsset(p, b)
		return nil
	})
	return out
})

func newWebAsset(p string, b []byte) *webAsset {
	sum := sha256.Sum256(b)
	a := &webAsset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: webContentType(p, b)}
	if compressible(a.ctype) && len(b) > 512 {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if buf.Len() < len(b) {
			a.gz = buf.Bytes()
		}
	}
	return a
}

// webContentType fixes the types DESIGN §9 names, whatever the host's mime tables say.
func webContentType(p string, b []byte) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json":
		return "application/json"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	case "":
		return "text/plain; charset=utf-8" // LICENSE
	}
	if ct := mime.TypeByExtension(path.Ext(p)); ct != "" {
		return ct
	}
	return http.DetectContentType(b)
}

func compressible(ct string) bool {
	return strings.HasPrefix(ct, "text/") || strings.HasPrefix(ct, "image/svg") || strings.HasPrefix(ct, "application/json")
}

func (s *server) handleDashboard(w http.ResponseWriter, r *http.Request) error {
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	assets := dashboardAssets()
	a, ok := assets[p]
	if !ok && path.Ext(p) == "" { // a deep link (an embedded file without extension, e.g. LICENSE, is served)
		p = "index.html"
		a, ok = assets[p]
	}
	if !ok {
		if p == "index.html" {
			return errorf(codeInternal, "the embedded dashboard has no index.html")
		}
		return errRouteNotFound(r)
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", a.etag)
	h.Set("Vary", "Accept-Encoding")
	if p == "index.html" {
		h.Set("Cache-Control", "no-cache")
		// The page talks only to this origin: no CDN, nothing from another host (DESIGN §9).
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
	} else {
		h.Set("Cache-Control", "no-cache") // revalidated by ETag: a new binary is never served stale
	}
	if etagMatch(r.Header.Get("If-None-Match"), a.etag) {
		h.Del("Content-Type")
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	body := a.body
	if a.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
	return nil
}

// etagMatch is If-None-Match's weak comparison over a list (or *).
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// acceptsGzip reads Accept-Encoding: gzip listed and not refused with q=0.
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.TrimSpace(name) != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
