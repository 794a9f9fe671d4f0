// web.go — the dashboard embedded in the binary (web/), served at GET / with the single-page-app
// fallback of docs/API.md convention 10.
//
// Rules (DESIGN §9): GETs outside /v1 without a file extension get index.html (deep links); a missing file
// with an extension is 404 E_ROUTE_NOT_FOUND; the page holds no data, so it is public even with a token.
package main

import (
	"embed"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed web
var webFiles embed.FS

func (s *server) handleDashboard(w http.ResponseWriter, r *http.Request) error {
	web, _ := fs.Sub(webFiles, "web")
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if p == "" || p == "index.html" || path.Ext(p) == "" {
		return s.serveIndex(w, r, web)
	}
	b, err := fs.ReadFile(web, p)
	if err != nil {
		return errRouteNotFound(r)
	}
	ct := mime.TypeByExtension(path.Ext(p))
	if ct == "" {
		ct = http.DetectContentType(b)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
	return nil
}

// serveIndex serves index.html; the placeholder's markers are filled with this server's facts.
func (s *server) serveIndex(w http.ResponseWriter, r *http.Request, web fs.FS) error {
	b, err := fs.ReadFile(web, "index.html")
	if err != nil {
		return errorf(codeInternal, "the embedded dashboard has no index.html")
	}
	note := "This server has no token: every request passes. Set AGENT_TOKEN before exposing it."
	curlAuth := ""
	if s.cfg.Token != "" {
		note = "This server requires a token: send Authorization: Bearer <AGENT_TOKEN> with every request except /health (EventSource and WebSocket clients may pass ?token= instead)."
		curlAuth = `-H "Authorization: Bearer $AGENT_TOKEN" `
	}
	host := r.Host
	if host == "" {
		host = net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	}
	page := strings.NewReplacer("{{VERSION}}", version, "{{AUTH_NOTE}}", note, "{{CURL_AUTH}}", curlAuth,
		"{{HOST}}", htmlEscape(host)).Replace(string(b))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write([]byte(page))
	}
	return nil
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func htmlEscape(s string) string { return htmlEscaper.Replace(s) }
