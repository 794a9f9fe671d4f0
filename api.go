// api.go — the HTTP surface: the server struct, the one routes() table, middleware (version header,
// CORS, bearer auth, body cap, idempotency), the error type with its code → status table, and the one
// decode/encode pair every handler uses.
//
// Rules: every response carries X-Agent-Version; every failure is the contract's envelope
// {error:{code,message,hint}}; an unknown path or a wrong method is 404 E_ROUTE_NOT_FOUND (never 405);
// bodies are capped at 32 MB; JSON bodies are strict (unknown keys are 422); X-Forwarded-For is ignored;
// a body left unread (a request refused from its headers) is never waited for: the connection closes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

const (
	maxBodyBytes  = 32 << 20 // contract: request bodies are capped at 32 MB (config.yaml's bodyLimitBytes)
	versionHeader = "X-Agent-Version"
)

// server owns every long-lived part of agentd. Built by newServer, torn down by Close in a fixed order.
type server struct {
	cfg        config
	live       atomic.Pointer[config] // the running configuration after a reload (conf, main_reload.go)
	reloads    chan os.Signal         // SIGHUP: re-read config.yaml (runServe routes it; tests send on it)
	log        *slog.Logger
	store      *store
	hub        *hub
	idem       *idempotencyCache
	computers  *computerService
	models     *modelService
	runs       *runService
	triggers   *triggerService
	sessions   *sessionService
	mcp        *mcpSessions // MCP sessions (mcp.go)
	mcpClients *mcpClients  // MCP servers agents use as tools (mcp_client.go)
	metrics    *metrics     // metrics.go: GET /metrics
	startedAt  time.Time
	firstRun   bool
	handler    http.Handler

	bodyWindowFor  time.Duration // tests shorten the body progress window (bodyWindow)
	streamStallFor time.Duration // tests shorten an exec stream's 60 s stall limit

	// diskFree reads the free space of the data directory (doctor); nil means the real one.
	diskFree func(dir string) (avail, total uint64, err error)

	// streamCtx is cancelled first at shutdown so SSE streams and sockets end before Shutdown waits.
	streamCtx    context.Context
	cancelStream context.CancelFunc
	reloaderDone chan struct{} // closed when the reload goroutine ended (Close waits)
}

// routes is the API's table of contents: every route the server answers is listed here.
func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()

	mux.HandleFunc("GET /health", s.api(s.handleHealth))
	mux.HandleFunc("GET /v1/doctor", s.api(s.handleDoctor))
	mux.HandleFunc("GET /openapi.json", s.api(s.handleOpenAPI)) // api_openapi.go (issue 31)
	mux.HandleFunc("GET /v1/events", s.api(s.handleEvents))

	// Agents.
	mux.HandleFunc("GET /v1/agents", s.api(s.handleListAgents))
	mux.HandleFunc("POST /v1/agents", s.api(s.handleCreateAgent))
	mux.HandleFunc("POST /v1/agents/validate", s.api(s.handleValidateAgent))
	mux.HandleFunc("GET /v1/agents/{name}", s.api(s.handleGetAgent))
	mux.HandleFunc("PUT /v1/agents/{name}", s.api(s.handlePutAgent))
	mux.HandleFunc("DELETE /v1/agents/{name}", s.api(s.handleDeleteAgent))
	mux.HandleFunc("POST /v1/agents/{name}/test", s.api(s.handleTestAgent)) // additions: agent tests (runs_tests.go)
	mux.HandleFunc("GET /v1/agents/{name}/test", s.api(s.handleLastTests))

	// Running an agent, runs and approvals.
	mux.HandleFunc("POST /v1/agents/{name}/run", s.api(s.handleRun))
	mux.HandleFunc("POST /v1/agents/{name}/run/stream", s.api(s.handleRunStream))
	mux.HandleFunc("GET /v1/runs", s.api(s.handleListRuns))
	mux.HandleFunc("GET /v1/runs/{id}", s.api(s.handleGetRun))
	mux.HandleFunc("GET /v1/runs/{id}/events", s.api(s.handleFollowRun))
	mux.HandleFunc("DELETE /v1/runs/{id}", s.api(s.handleDeleteRun))
	mux.HandleFunc("POST /v1/runs/{id}/cancel", s.api(s.handleCancelRun))
	mux.HandleFunc("GET /v1/approvals", s.api(s.handleListApprovals))
	mux.HandleFunc("POST /v1/approvals/{id}", s.api(s.handleAnswerApproval))

	// Computers, exec, files, ports, terminal.
	mux.HandleFunc("GET /v1/computers", s.api(s.handleListComputers))
	mux.HandleFunc("POST /v1/computers", s.api(s.handleCreateComputer))
	mux.HandleFunc("GET /v1/computers/{id}", s.api(s.handleGetComputer))
	mux.HandleFunc("DELETE /v1/computers/{id}", s.api(s.handleDeleteComputer))
	mux.HandleFunc("POST /v1/computers/{id}/stop", s.api(s.handleStopComputer))
	mux.HandleFunc("POST /v1/computers/{id}/start", s.api(s.handleStartComputer))
	mux.HandleFunc("POST /v1/computers/{id}/exec", s.api(s.handleExec))
	mux.HandleFunc("POST /v1/computers/{id}/exec/stream", s.api(s.handleExecStream))
	mux.HandleFunc("GET /v1/computers/{id}/fs", s.api(s.handleListDir))
	mux.HandleFunc("GET /v1/computers/{id}/fs/read", s.api(s.handleReadFile))
	mux.HandleFunc("PUT /v1/computers/{id}/fs/write", s.api(s.handleWriteFile))
	mux.HandleFunc("DELETE /v1/computers/{id}/fs", s.api(s.handleDeleteFile))
	mux.HandleFunc("POST /v1/computers/{id}/fs/upload", s.api(s.handleUpload))
	mux.HandleFunc("GET /v1/computers/{id}/fs/download", s.api(s.handleDownload))
	mux.HandleFunc("POST /v1/computers/{id}/ports", s.api(s.handleExposePort))
	mux.HandleFunc("GET /v1/computers/{id}/terminal", s.api(s.handleTerminal))
	mux.HandleFunc("POST /v1/computers/{id}/browse", s.api(s.handleBrowse))
	mux.HandleFunc("GET /v1/computers/{id}/browser/status", s.api(s.handleBrowserStatus))
	mux.HandleFunc("POST /v1/computers/{id}/browser/goto", s.api(s.handleBrowserGoto))
	mux.HandleFunc("POST /v1/computers/{id}/browser/snapshot", s.api(s.handleBrowserSnapshot))
	mux.HandleFunc("POST /v1/computers/{id}/browser/click", s.api(s.handleBrowserClick))
	mux.HandleFunc("POST /v1/computers/{id}/browser/type", s.api(s.handleBrowserType))
	mux.HandleFunc("GET /v1/computers/{id}/browser/screenshot", s.api(s.handleBrowserScreenshot))
	mux.HandleFunc("DELETE /v1/computers/{id}/browser", s.api(s.handleBrowserClose))

	// Models.
	mux.HandleFunc("GET /v1/models", s.api(s.handleListModels))
	mux.HandleFunc("POST /v1/models/chat", s.api(s.handleChat))
	mux.HandleFunc("POST /v1/models/chat/stream", s.api(s.handleChatStream))

	// Sessions (transcripts → specs).
	mux.HandleFunc("GET /v1/sessions", s.api(s.handleListSessions)) // additions: stored transcripts
	mux.HandleFunc("GET /v1/sessions/{id}", s.api(s.handleGetSession))
	mux.HandleFunc("GET /v1/sessions/discover", s.api(s.handleDiscoverSessions))
	mux.HandleFunc("POST /v1/sessions/import", s.api(s.handleImportSession))
	mux.HandleFunc("POST /v1/sessions/distill", s.api(s.handleDistill))
	mux.HandleFunc("POST /v1/sessions/distill/stream", s.api(s.handleDistillStream))

	// Triggers: two wildcard mounts registered once; dispatch tables rebuilt on every agent change.
	mux.HandleFunc("/v1/t/{agent}", s.api(s.handleHTTPTrigger))
	mux.HandleFunc("/v1/t/{agent}/{path...}", s.api(s.handleHTTPTrigger))
	mux.HandleFunc("POST /v1/w/{agent}/{path...}", s.api(s.handleWebhookTrigger))
	mux.HandleFunc("GET /v1/triggers", s.api(s.handleListTriggers))

	// Protocols (issue 18): Prometheus metrics (metrics.go), the OpenAI-compatible gateway (gateway_openai.go).
	mux.HandleFunc("GET /metrics", s.api(s.handleMetrics))
	mux.HandleFunc("GET /openai/v1/models", s.openai(s.handleOpenAIModels))
	mux.HandleFunc("POST /openai/v1/chat/completions", s.openai(s.handleOpenAIChat))
	mux.HandleFunc("/openai/", s.openai(s.handleOpenAINotFound)) // OpenAI's error shape for the rest

	// MCP: the streamable HTTP transport (mcp_http.go); one pattern for every method (GET is 405 there).
	mux.HandleFunc("/mcp", s.api(s.handleMCP))
	mux.HandleFunc("GET /mcp/info", s.api(s.handleMCPInfo))

	// The catch-all: GETs outside /v1 serve the dashboard (single-page-app fallback); every other
	// unknown path, and every wrong method on a known path, is 404 E_ROUTE_NOT_FOUND (never 405).
	mux.HandleFunc("/", s.api(s.handleFallback))
	return mux
}

// ServeHTTP runs the middleware chain in a fixed order around the mux.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(versionHeader, version)
	id := r.Header.Get("X-Request-Id")
	if !validRequestID(id) {
		id = newID("req")
	}
	w.Header().Set("X-Request-Id", id)
	note := &routeNote{} // api() fills in the mux pattern for the metrics
	r = r.WithContext(context.WithValue(context.WithValue(r.Context(), requestIDKey{}, id), routeNoteKey{}, note))
	lw := &loggedWriter{ResponseWriter: w}
	w = lw
	lc := connOf(r.Context())
	var body *progressBody // set once the body may be read
	defer func() {
		// A body left unread (a request refused from its headers, or a handler that did not need it)
		// is not waited for: net/http would read up to 256 KiB of it to reuse the connection, with no
		// deadline, so a client holding it back would hold the connection (issue 25). The read ends at
		// once and the connection closes after the answer.
		if r.ContentLength != 0 && r.Body != http.NoBody && (body == nil || !body.eof) {
			http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		if lc != nil {
			lc.handled()
		}
	}()
	start := time.Now()
	defer func() { // one line per request; the path only, never the query (it may carry ?token=)
		s.metrics.httpDone(note.pattern, r.Method, lw.status, time.Since(start))
		level := slog.LevelInfo
		if r.URL.Path == "/health" { // polled by load balancers: not worth a line each
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "request", "method", r.Method, "path", r.URL.Path, "status", lw.status,
			"bytes", lw.bytes, "ms", time.Since(start).Milliseconds(), "requestId", id)
	}()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeError(w, r, fmt.Errorf("panic in handler: %v", v))
		}
	}()
	if s.cors(w, r) {
		return
	}
	// A browser page from another origin can send a "simple" POST (text/plain, no preflight) that the
	// server would run — on a token-less loopback server that is a shell for any website. Browsers always
	// send Origin on such requests; CLIs send none. So a write carrying a foreign Origin is refused, as the
	// WebSocket upgrade is (DESIGN §3).
	if o := r.Header.Get("Origin"); o != "" && !safeMethod(r.Method) && !s.originAllowed(o, r) {
		s.refuseEarly(w, r, errorf(codeExecDenied, "origin %q is not allowed", o).
			withHint("add the origin to corsOrigins in config.yaml, "+takesEffect("corsOrigins")))
		return
	}
	// DNS rebinding: a page on evil.example whose name is re-pointed at 127.0.0.1 becomes "same origin"
	// with a token-less server. Such a server (only possible on a loopback bind) answers only to loopback
	// names, which a rebinding page cannot present.
	if s.cfg.Token == "" && r.URL.Path != "/health" && !loopbackHostHeader(r.Host) {
		s.refuseEarly(w, r, errorf(codeExecDenied, "host %q is not a loopback name; this server has no token", r.Host).
			withHint("use http://127.0.0.1 or http://localhost, or set AGENT_TOKEN"))
		return
	}
	if lc != nil && lc.reserve && r.URL.Path != "/health" {
		s.refuseEarly(w, r, errAtCapacity())
		return
	}
	if r.URL.Path != "/health" && !dashboardPage(r) && !s.publicMetrics(r) && !s.authorized(r) {
		s.refuseEarly(w, r, errorf(codeNoCredentials, "missing or wrong bearer token").
			withHint("send Authorization: Bearer <AGENT_TOKEN>"))
		return
	}
	if r.ContentLength > s.cfg.BodyLimitBytes { // declared too large: refuse before reading a byte
		s.refuseEarly(w, r, &http.MaxBytesError{Limit: s.cfg.BodyLimitBytes})
		return
	}
	if lc != nil && r.ContentLength != 0 && r.Body != http.NoBody {
		lc.bodyStarted()
	}
	body = &progressBody{ReadCloser: http.MaxBytesReader(w, r.Body, s.cfg.BodyLimitBytes), rc: http.NewResponseController(w),
		window: s.bodyWindow(), conn: lc}
	r.Body = body
	s.idem.serve(w, r, s.handler)
}

// refuseEarly answers a request refused from its headers alone: the body is never waited for, and the
// connection is closed so the server does not drain it either (a trickled or held-back body must not
// hold a connection, issue 25).
func (s *server) refuseEarly(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	s.refuse(w, r, err)
}

// bodyMinRate: a request body must keep coming — at least 1 KiB per bodyWindow — or it is cut off with
// 408; a slow client cannot hold a connection with a trickle (DESIGN §3).
const bodyMinRate = 1 << 10

func (s *server) bodyWindow() time.Duration {
	if s.bodyWindowFor > 0 { // tests shorten it
		return s.bodyWindowFor
	}
	return 10 * time.Second
}

// progressBody moves the connection's read deadline forward each time another bodyMinRate bytes have
// arrived; at the end of the body the deadline is cleared (a stream or socket then keeps its own rules).
type progressBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	window  time.Duration
	started bool
	eof     bool         // read whole
	since   int          // bytes since the deadline was last moved
	conn    *limitedConn // told of the body's progress (shedding picks the slowest); nil under httptest
}

func (b *progressBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.rc.SetReadDeadline(time.Now().Add(b.window))
	}
	n, err := b.ReadCloser.Read(p)
	if b.since += n; b.since >= bodyMinRate {
		b.since = 0
		b.rc.SetReadDeadline(time.Now().Add(b.window))
	}
	if b.conn != nil {
		b.conn.bodyProgress(n, err != nil)
	}
	if err == io.EOF {
		b.eof = true
		b.rc.SetReadDeadline(time.Time{})
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return n, errBodyTooSlow()
	}
	return n, err
}

// errBodyTooSlow is a body that stalled or trickled: 408, and the connection closed.
func errBodyTooSlow() *apiError {
	return &apiError{Code: codeSpecInvalid, status: http.StatusRequestTimeout,
		Message: fmt.Sprintf("the request body stalled: it must keep arriving at %d bytes per 10 s at least", bodyMinRate),
		Hint:    "send the body at once; for large uploads keep the connection busy"}
}

// loggedWriter counts what a response wrote for the request log. It unwraps for http.ResponseController
// (SSE flushes and deadlines) and hijacks for WebSockets.
type loggedWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (l *loggedWriter) WriteHeader(code int) {
	if l.status == 0 {
		l.status = code
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *loggedWriter) Write(b []byte) (int, error) {
	if l.status == 0 {
		l.status = http.StatusOK
	}
	n, err := l.ResponseWriter.Write(b)
	l.bytes += int64(n)
	return n, err
}

func (l *loggedWriter) Unwrap() http.ResponseWriter { return l.ResponseWriter }

func (l *loggedWriter) Flush() { http.NewResponseController(l.ResponseWriter).Flush() }

func (l *loggedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	l.status = http.StatusSwitchingProtocols
	return http.NewResponseController(l.ResponseWriter).Hijack()
}

// cors answers preflight requests and sets CORS headers for configured origins. It reports whether the
// request was fully answered. CORS stays off unless corsOrigins names the origin (or "*").
func (s *server) cors(w http.ResponseWriter, r *http.Request) bool {
	if len(s.conf().CORSOrigins) == 0 {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin") // answers differ by Origin, so caches must key on it
	origin := r.Header.Get("Origin")
	if origin == "" || !s.originAllowed(origin, r) {
		return false
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "X-Agent-Version, Idempotency-Replayed")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Accept")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// loopbackHostHeader: the Host header names this machine's loopback (localhost, *.localhost, 127/8, ::1).
func loopbackHostHeader(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// originAllowed: the server's own origin always; otherwise only origins listed in corsOrigins.
func (s *server) originAllowed(origin string, r *http.Request) bool {
	if origin == "http://"+r.Host || origin == "https://"+r.Host {
		return true
	}
	if r.URL.Path == "/mcp" && mcpLoopbackOrigin(origin) && loopbackHostHeader(r.Host) { // a local MCP client
		return true
	}
	for _, o := range s.conf().CORSOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// authorized checks the bearer token in constant time. Browsers cannot set headers on EventSource or
// WebSocket, so for those two transports only — a GET of a stream or socket route — the token may come
// as ?token= or ?access_token=.
func (s *server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	got, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok && isStreamOrSocket(r) && r.Method == http.MethodGet && streamRoute(r.URL.Path) {
		got = r.URL.Query().Get("token")
		if got == "" {
			got = r.URL.Query().Get("access_token")
		}
	}
	return tokenEqual(got, s.cfg.Token)
}

// bearerToken extracts the credentials of an Authorization header; the scheme is case-insensitive.
func bearerToken(h string) (string, bool) {
	if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
		return "", false
	}
	return strings.TrimSpace(h[7:]), true
}

// tokenEqual compares hashes so neither the content nor the length of the token leaks through timing.
func tokenEqual(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && got != ""
}

// streamRoute: the GET routes that are event streams or sockets, the only ones a browser cannot send a
// header to — and so the only ones where ?token= is accepted (a DELETE carrying ?token= is not).
func streamRoute(p string) bool {
	switch {
	case p == "/v1/events":
		return true
	case strings.HasPrefix(p, "/v1/computers/") && strings.HasSuffix(p, "/terminal"):
		return strings.Count(p, "/") == 4
	case strings.HasPrefix(p, "/v1/runs/") && strings.HasSuffix(p, "/events"):
		return strings.Count(p, "/") == 4
	}
	return false
}

func isStreamOrSocket(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream") ||
		strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (s *server) handleFallback(w http.ResponseWriter, r *http.Request) error {
	if dashboardPage(r) {
		return s.handleDashboard(w, r)
	}
	return errRouteNotFound(r)
}

// dashboardPage: a GET or HEAD outside /v1 is the dashboard (its page, assets, deep links). It holds no
// data, so it is public even with a token (DESIGN §9); everything it shows comes from /v1, which is not.
func dashboardPage(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") &&
		r.URL.Path != "/metrics" && !strings.HasPrefix(r.URL.Path, "/openai/") // issue 18's endpoints need the token
}

// publicMetrics: config.yaml's metricsPublic lets a scraper read GET /metrics without the token.
func (s *server) publicMetrics(r *http.Request) bool {
	return s.conf().MetricsPublic && r.URL.Path == "/metrics" && safeMethod(r.Method)
}

func errRouteNotFound(r *http.Request) error {
	return errorf(codeRouteNotFound, "no route for %s %s", r.Method, r.URL.Path).
		withHint("see GET / for the list of endpoints")
}

// handleHealth is the liveness probe; hot (load balancers poll it), so its body is appended by hand.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	b := make([]byte, 0, 64)
	b = append(b, `{"ok":true,"uptimeSec":`...)
	b = strconv.AppendInt(b, int64(time.Since(s.startedAt).Seconds()), 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendQuote(b, version)
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return nil
}

// ---- errors ----

// The contract's error codes. All 25 are declared; removing one is a breaking change.
const (
	codeProviderUnavailable = "E_PROVIDER_UNAVAILABLE"
	codeComputerNotFound    = "E_COMPUTER_NOT_FOUND"
	codeComputerFailed      = "E_COMPUTER_FAILED"
	codeExecFailed          = "E_EXEC_FAILED"
	codeExecTimeout         = "E_EXEC_TIMEOUT" // reserved, never thrown: read ExecResult.timedOut
	codeExecDenied          = "E_EXEC_DENIED"
	codeFSDenied            = "E_FS_DENIED"
	codeQuota               = "E_QUOTA"
	codeModelUnavailable    = "E_MODEL_UNAVAILABLE"
	codeModelError          = "E_MODEL_ERROR"
	codeNoCredentials       = "E_NO_CREDENTIALS"
	codeSpecInvalid         = "E_SPEC_INVALID"
	codeImportFailed        = "E_IMPORT_FAILED"
	codeToolError           = "E_TOOL_ERROR"
	codeBudgetExceeded      = "E_BUDGET_EXCEEDED"
	codeStepLimit           = "E_STEP_LIMIT" // reserved, never thrown: a run ends with stopReason step_limit
	codeAborted             = "E_ABORTED"
	codeNotImplemented      = "E_NOT_IMPLEMENTED"
	codeConfig              = "E_CONFIG"
	codeInternal            = "E_INTERNAL"
	codeAgentNotFound       = "E_AGENT_NOT_FOUND"
	codeRunNotFound         = "E_RUN_NOT_FOUND"
	codeApprovalNotFound    = "E_APPROVAL_NOT_FOUND"
	codeTranscriptNotFound  = "E_TRANSCRIPT_NOT_FOUND"
	codeRouteNotFound       = "E_ROUTE_NOT_FOUND"
)

// statusOf is the one code → status table: docs/API.md's explicit rows, then its suffix rules (_NOT_FOUND →
// 404, _DENIED → 403) resolved for every declared code, then 500. Its keys are the 25 declared codes.
var statusOf = map[string]int{
	codeNoCredentials:       http.StatusUnauthorized,
	codeSpecInvalid:         http.StatusUnprocessableEntity,
	codeQuota:               http.StatusTooManyRequests,
	codeBudgetExceeded:      http.StatusTooManyRequests,
	codeNotImplemented:      http.StatusNotImplemented,
	codeProviderUnavailable: http.StatusServiceUnavailable,
	codeModelUnavailable:    http.StatusServiceUnavailable,
	codeExecTimeout:         http.StatusGatewayTimeout,
	codeComputerNotFound:    http.StatusNotFound,
	codeAgentNotFound:       http.StatusNotFound,
	codeRunNotFound:         http.StatusNotFound,
	codeApprovalNotFound:    http.StatusNotFound,
	codeTranscriptNotFound:  http.StatusNotFound,
	codeRouteNotFound:       http.StatusNotFound,
	codeExecDenied:          http.StatusForbidden,
	codeFSDenied:            http.StatusForbidden,
	codeComputerFailed:      http.StatusInternalServerError,
	codeExecFailed:          http.StatusInternalServerError,
	codeModelError:          http.StatusInternalServerError,
	codeImportFailed:        http.StatusInternalServerError,
	codeToolError:           http.StatusInternalServerError,
	codeStepLimit:           http.StatusInternalServerError,
	codeAborted:             http.StatusInternalServerError,
	codeConfig:              http.StatusInternalServerError,
	codeInternal:            http.StatusInternalServerError,
}

// apiError is the one error type that crosses the API. Code is one of the contract's codes.
type apiError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Hint    string         `json:"hint"`
	Details map[string]any `json:"details,omitempty"`
	cause   error          // an unclassified error behind E_INTERNAL: logged, never answered
	status  int            // a transport refusal the codes do not name (408 for a stalled body); else from the code
}

func (e *apiError) Error() string {
	if e.Code == "" { // a client-side failure with no contract code (the CLI's "no server answers")
		return e.Message
	}
	return e.Code + ": " + e.Message
}

func errorf(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *apiError) withHint(hint string) *apiError { e.Hint = hint; return e }

func (e *apiError) withDetail(key string, v any) *apiError {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = v
	return e
}

// asAPIError turns any error into an apiError; unknown errors become E_INTERNAL "internal error" with the
// error kept only as the unexported cause (see publicError).
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		size := fmt.Sprintf("%d-byte", mbe.Limit)
		if mbe.Limit%(1<<20) == 0 {
			size = fmt.Sprintf("%d MB", mbe.Limit>>20)
		}
		return errorf(codeSpecInvalid, "request body exceeds the %s cap", size).
			withHint("send a smaller body, or raise bodyLimitBytes in config.yaml, "+takesEffect("bodyLimitBytes")).withDetail("limit", mbe.Limit)
	}
	if errors.Is(err, context.Canceled) {
		return errorf(codeAborted, "request cancelled").withHint("the client went away or the server is shutting down; retry")
	}
	return &apiError{Code: codeInternal, Message: "internal error", cause: err,
		Hint: "this is a bug in agentd or a failure of its data directory; the server log has the detail"}
}

// ---- ids ----

// idAlphabet is Crockford's base32 in lower case: ids read unambiguously and sort like their bytes.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// newID is the one id generator: prefix + "_" + 16 random base32 characters (80 bits). Ids are opaque
// to clients (docs/API.md); run ids add a time part (newRunID) so they sort by time.
func newID(prefix string) string { return prefix + "_" + randomChars(16) }

// randomChars returns n random characters of idAlphabet.
func randomChars(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i, c := range b {
		b[i] = idAlphabet[c&31]
	}
	return string(b)
}

// requestIDKey carries the request id (also sent as X-Request-Id) in a request's context.
type requestIDKey struct{}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// validRequestID accepts a caller's X-Request-Id only in a form that is safe to log and echo.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// apiFunc is the shape of an API handler: it writes its answer and returns nil, or returns the error the
// adapter answers with. Handlers never write an error envelope themselves.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// api adapts an apiFunc to the mux: a returned error becomes the contract's envelope.
func (s *server) api(f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		noteRoute(r)
		if err := f(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// writeError answers with the contract's envelope. An unclassified error (a bug, a failing disk) is
// logged with its detail and answered only as "internal error" with the request id: raw error text can
// carry paths, SQL or engine output.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, s.publicError(r.Context(), err))
}

// publicError is the form of err that may leave the server: an unclassified error is logged here and
// replaced by "internal error (request <id>)".
func (s *server) publicError(ctx context.Context, err error) *apiError {
	ae := asAPIError(err)
	if ae.cause == nil {
		return ae
	}
	id := requestID(ctx)
	s.log.Error("internal error", "requestId", id, "err", ae.cause)
	out := *ae
	if id != "" {
		out.Message = "internal error (request " + id + ")"
	}
	return &out
}

// writeError writes the contract's envelope with the status derived from the code. Handlers return
// errors instead; the adapter and the middleware call (*server).writeError.
func writeError(w http.ResponseWriter, err error) {
	ae := asAPIError(err)
	status, ok := statusOf[ae.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if ae.status != 0 {
		status = ae.status
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, map[string]any{"error": ae})
}

// ---- decode / encode ----

// reply ends a handler: err (through the adapter), or v as JSON with status.
func reply(w http.ResponseWriter, status int, v any, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, status, v)
	return nil
}

// noContent ends a handler whose success has no body: err, or 204.
func noContent(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// writeJSON encodes v with the given status. It is the only JSON writer of the API.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"E_INTERNAL","message":"response encoding failed","hint":""}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// writeRawJSON writes bytes that are already a JSON document (assembled by a hot handler); unlike
// writeJSON with a json.RawMessage it does not re-scan them.
func writeRawJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// readBody reads the (already capped) request body whole.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, asAPIError(err)
	}
	return b, nil
}

// decode reads a strict JSON body into v: capped, valid UTF-8, one value, no unknown keys. Every
// failure is a 422 E_SPEC_INVALID whose message says what is wrong and where.
func decode(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeBytes(b, v)
}

func decodeBytes(b []byte, v any) error { return decodeJSON(b, v, true) }

// decodeJSON is the one rule for a JSON body: not empty, valid UTF-8, one value, no key twice in an
// object (encoding/json would keep the last silently). strict adds: no unknown keys (the /v1 contract);
// the OpenAI gateway, whose clients send fields of their own, decodes with strict false.
func decodeJSON(b []byte, v any, strict bool) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errorf(codeSpecInvalid, "request body is empty; a JSON object is required").
			withHint("send a JSON object with Content-Type: application/json")
	}
	if !utf8.Valid(b) {
		return errorf(codeSpecInvalid, "request body is not valid UTF-8").withHint("encode the body as UTF-8 JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return errorf(codeSpecInvalid, "request body has data after the JSON value").
			withHint("send exactly one JSON object")
	}
	if p := duplicateKey(b); p != "" { // encoding/json keeps the last silently; YAML refuses: so do we
		return errorf(codeSpecInvalid, "%s: duplicate key", p).withHint("send each key once")
	}
	if !strict {
		return nil
	}
	return exactKeys(b, v)
}

// duplicateKey returns the dotted path of the first key an object of a (valid) JSON document repeats.
func duplicateKey(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func(path string) string // reads one value, and a container's values under it
	walk = func(path string) string {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		seen := map[string]bool{}
		for i := 0; (tok == json.Delim('{') || tok == json.Delim('[')) && dec.More(); i++ {
			key := strconv.Itoa(i)
			if tok == json.Delim('{') {
				k, _ := dec.Token()
				if key, _ = k.(string); seen[key] {
					return joinPath(path, key)
				}
				seen[key] = true
			}
			if p := walk(joinPath(path, key)); p != "" {
				return p
			}
		}
		if tok == json.Delim('{') || tok == json.Delim('[') {
			dec.Token() // its closing delimiter
		}
		return ""
	}
	return walk("")
}

// exactKeys refuses top-level keys that encoding/json matched only by folding case ("Input" for "input"):
// a strict body knows its keys exactly. It checks only structs whose every field names its key in a tag.
func exactKeys(b []byte, v any) error {
	names := map[string]bool{}
	if !jsonKeyNames(reflect.TypeOf(v), names) {
		return nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return nil
	}
	var bad []string
	for k := range top {
		if !names[k] {
			bad = append(bad, "'"+k+"'")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return errorf(codeSpecInvalid, "Unrecognized key(s) in object: %s", strings.Join(bad, ", ")).
		withHint("keys are case-sensitive; see docs/API.md for the accepted keys")
}

// jsonKeyNames collects the JSON keys of a struct type (through embedded structs); false when a key is
// implicit (an untagged field) or the type decodes itself.
func jsonKeyNames(t reflect.Type, names map[string]bool) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case name == "-" && tag == "-":
		case f.Anonymous && name == "":
			if !jsonKeyNames(f.Type, names) {
				return false
			}
		case !f.IsExported():
		case !hasTag || name == "":
			return false
		default:
			names[name] = true
		}
	}
	return true
}

// jsonTypeName names a Go type the way a JSON client thinks of it.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.String()
}

// jsonError turns an encoding/json failure into a clear 422.
func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errorf(codeSpecInvalid, "malformed JSON at byte %d: %s", syn.Offset, syn.Error()).
			withHint("check the body is valid JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(root)"
		}
		return errorf(codeSpecInvalid, "%s: Expected %s, received %s", field, jsonTypeName(typ.Type), typ.Value).
			withHint("fix the type of the field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(codeSpecInvalid, "malformed JSON: unexpected end of body").withHint("check the body is complete JSON")
	}
	msg := err.Error()
	if k, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return errorf(codeSpecInvalid, "Unrecognized key(s) in object: %s", strings.ReplaceAll(k, `"`, "'")).
			withHint("remove the unknown key; see docs/API.md for the accepted keys")
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return errorf(codeSpecInvalid, "invalid JSON body: %s", strings.TrimPrefix(msg, "json: ")).
		withHint("check the body against docs/API.md")
}
