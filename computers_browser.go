// computers_browser.go — a real Chromium inside each machine, driven over the DevTools protocol (issue 28):
// its lifecycle and the /v1/computers/:id/browser routes.
//
// Entry points: computerService.browser (the machine's browser, started on first use, started again
// after it crashed), BrowserStatus, BrowserGoto (gotoURL and awaitLoad, which history and tabs share),
// BrowserSnapshot, BrowserClick, BrowserType, BrowserScreenshot, BrowserClose (the further operations
// are in computers_browser_actions.go); closeBrowser (stop, destroy and vanish call it), endBrowsers (the
// service's Close: Chromium stopped in every machine, which lives on); browserDoctor; the handlers.
//
// Rules: Chromium runs in the machine, as the machine's user, started through the machine's own exec path
// (Exec: the command policy applies), headless, with its DevTools port on the machine's loopback only
// (port 0: Chromium picks a free one and writes it to DevToolsActivePort) and its profile under the
// machine's /tmp, kept while the machine lives. agentd reaches that port the way it reaches every port
// of the machine (machineDial: the exec channel's streams). Its network is the machine's: in mode egress
// every request goes through the machine's egress proxy (--proxy-server; loopback is never proxied), so
// the machine's rules apply; in mode none the machine has only its loopback. `--no-sandbox` only inside
// machines (the machine is the sandbox, and it has neither user namespaces nor a setuid helper to give
// Chromium's own); on local Chromium keeps its sandbox. One operation at a time per browser; a click or
// a type waits up to 0.7 s for a navigation it may have started (then for its load); an idle
// browser (browserIdleAfter, measured on the service's clock) is stopped by its own goroutine; the
// browser dies with its machine (destroy and stop end it; the machine's end kills its processes).
// Refs are `e<backendDOMNodeId>`: stable for a node while the page lives, unknown after it navigated.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	browserIdleAfter    = 5 * time.Minute
	browserIdleTick     = 15 * time.Second
	browserWidth        = 1280
	browserHeight       = 800
	browserSnapshotMax  = 5000
	browserSnapshotDflt = 400
	browserStartTimeout = 90 * time.Second // Chromium's first start on a loaded 2-core host takes seconds
)

// browserSettings are the browser's timings; zero fields are the defaults (a test shortens the tick).
type browserSettings struct {
	idleAfter, tick time.Duration
}

func (s browserSettings) idle() time.Duration { return cmpDur(s.idleAfter, browserIdleAfter) }
func (s browserSettings) every() time.Duration {
	return cmpDur(s.tick, browserIdleTick)
}

func cmpDur(v, dflt time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return dflt
}

// machineBrowser is one running Chromium of one machine.
type machineBrowser struct {
	c       *computerService
	id      string // the machine
	dir     string // its directory in the machine (profile, log, home)
	cdp     *cdpConn
	target  string // the current tab's target id (also its main frame's id)
	session string // the flattened session attached to the current tab
	// Every tab agentd has attached to (target → session) and the tabs in the order first seen (their
	// indexes: computers_browser_actions.go).
	sessions map[string]string
	tabs     []string
	// The refs of the last snapshot and the document they belong to (its loader): a ref is acted on
	// only while that document is still the page's (Chromium reuses node ids across documents).
	refs       map[int64]bool
	refsLoader string

	op       sync.Mutex   // one operation at a time
	busy     atomic.Int32 // operations in flight or about to start (the idle check skips a busy browser)
	lastUsed atomic.Int64 // unix nanoseconds on the service's clock

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// browserDir is the browser's directory inside machine id (ids are [a-z0-9_-]).
func browserDir(id string) string { return "/tmp/.agentd-browser-" + id }

// browserFlags are Chromium's arguments in machine m.
func browserFlags(m *ComputerInfo, dir string) []string {
	f := []string{"--headless", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--disable-breakpad", "--mute-audio", "--hide-scrollbars",
		"--user-data-dir=" + dir + "/profile", "--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1",
		fmt.Sprintf("--window-size=%d,%d", browserWidth, browserHeight)}
	if m.Provider != "local" {
		f = append(f, "--no-sandbox")
	}
	switch m.Spec.Network.Mode {
	case "egress": // through the machine's proxy, which applies its rules; loopback stays direct
		f = append(f, "--proxy-server=http://127.0.0.1:"+strconv.Itoa(egressProxyPort))
	case "none": // nothing but loopback exists; a proxy that refuses makes that plain and fast
		f = append(f, "--proxy-server=http://127.0.0.1:9")
	}
	return append(f, "about:blank")
}

// browserBinaries are the names Chromium goes by, in the order they are looked for: Debian's binary
// itself first (its /usr/bin/chromium wrapper reads /etc/chromium.d, which the sandbox does not have).
var browserBinaries = []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// browserRun is the shell that runs the machine's Chromium as `<prefix><name> <rest>` (shell text) and
// exits 3 when there is none. Each name is written out: the command policy refuses a computed command.
func browserRun(prefix, rest string) string {
	var b strings.Builder
	for i, name := range browserBinaries {
		kw := "elif"
		if i == 0 {
			kw = "if"
		}
		fmt.Fprintf(&b, "%s command -v %s >/dev/null 2>&1; then\n  %s%s %s\n", kw, name, prefix, name, rest)
	}
	b.WriteString("else\n  echo 'no chromium in this machine' >&2; exit 3\nfi\n")
	return b.String()
}

// browserKill is the shell that kills every process of the browser in directory $d: a Chromium
// executable whose command line holds that profile (every one of its processes does; procps may be
// missing, /proc is always there). The shell running this holds the profile in its own command line
// but is not Chromium.
const browserKill = `for p in /proc/[0-9]*; do
  case "$(readlink "$p/exe" 2>/dev/null)" in *chrom*)
    case "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" in *"--user-data-dir=$d/profile"*) kill -KILL "${p#/proc/}" 2>/dev/null ;; esac ;;
  esac
done
`

// browserMissing is the error of a machine without Chromium, saying how to get one.
func browserMissing(m *ComputerInfo) *apiError {
	return errorf(codeNotImplemented, "computer %s has no Chromium (looked for chromium, chromium-browser, google-chrome)", m.ID).
		withHint(browserHint(m))
}

func browserHint(m *ComputerInfo) string {
	switch m.Provider {
	case "sandbox", "local":
		return "the " + m.Provider + " provider runs the host's Chromium: install it on the host (Debian: apt-get install chromium)"
	case "kubernetes":
		return "create the computer with flavor browser, whose image has Chromium (scripts/test-image.sh --flavor browser builds it; push it where the cluster pulls from)"
	}
	return "create the computer with flavor browser (its image, agentd-test:browser, is built offline from Debian's packages by scripts/test-image.sh --flavor browser), or add chromium to the image"
}

func (c *computerService) browserProgress(id, msg string) {
	c.hub.publish("computers", "browser_progress", map[string]any{"id": id, "computerId": id, "message": msg})
}

// shell runs an internal script of the browser in machine id through the machine's exec path.
func (c *computerService) browserShell(ctx context.Context, id, script string, timeout time.Duration) (*ExecResult, error) {
	return c.Exec(ctx, id, ExecRequest{Cmd: execCommand{Shell: script}, Cwd: "/tmp", TimeoutSec: int(timeout / time.Second)}, nil)
}

// browser returns machine id's running browser, starting it (again, after a crash) when needed. The
// caller must call release on it when its operation is done.
func (c *computerService) browser(ctx context.Context, id string) (*machineBrowser, error) {
	m, _, err := c.getLive(ctx, id)
	if err != nil {
		return nil, err
	}
	rt := c.runtime(m.ID)
	rt.brMu.Lock()
	defer rt.brMu.Unlock()
	if b := rt.br; b != nil {
		select {
		case <-b.cdp.done():
			c.browserProgress(m.ID, "the browser had exited; starting it again")
			b.close()
			rt.br = nil
		default:
			b.acquire()
			return b, nil
		}
	}
	b, err := c.startBrowser(ctx, m)
	if err != nil {
		return nil, err
	}
	rt.br = b
	b.acquire()
	return b, nil
}

func (b *machineBrowser) acquire() {
	b.busy.Add(1)
	b.lastUsed.Store(b.c.now().UnixNano())
	b.op.Lock()
}

func (b *machineBrowser) release() {
	b.lastUsed.Store(b.c.now().UnixNano())
	b.op.Unlock()
	b.busy.Add(-1)
}

func (c *computerService) startBrowser(ctx context.Context, m *ComputerInfo) (*machineBrowser, error) {
	d := browserDir(m.ID)
	c.browserProgress(m.ID, "starting Chromium")
	var flags strings.Builder
	for _, f := range browserFlags(m, d) {
		flags.WriteString(" '" + f + "'")
	}
	script := "d='" + d + "'\n" + browserKill + `mkdir -p "$d/profile" "$d/home"
rm -f "$d/profile/DevToolsActivePort"
export HOME="$d/home" XDG_CONFIG_HOME="$d/home/.config" XDG_CACHE_HOME="$d/home/.cache"
` + browserRun("setsid ", flags.String()+` >"$d/log" 2>&1 </dev/null &`) + `pid=$!
i=0
while [ $i -lt 800 ]; do
  if [ -s "$d/profile/DevToolsActivePort" ]; then cat "$d/profile/DevToolsActivePort"; exit 0; fi
  if ! kill -0 $pid 2>/dev/null; then break; fi
  sleep 0.1; i=$((i+1))
done
tail -n 15 "$d/log" >&2; exit 4
`
	res, err := c.browserShell(ctx, m.ID, script, browserStartTimeout)
	if err != nil {
		return nil, err
	}
	switch {
	case res.ExitCode == 3:
		return nil, browserMissing(m)
	case res.ExitCode != 0 || res.TimedOut:
		return nil, errorf(codeComputerFailed, "Chromium did not start in computer %s (exit %d): %s", m.ID, res.ExitCode, lastLines(res.Stderr, 8)).
			withHint("the machine needs about 300 MB of memory for Chromium (memoryMb); its log is " + d + "/log")
	}
	port, path, ok := parseDevToolsActivePort(res.Stdout)
	if !ok {
		return nil, errorf(codeComputerFailed, "Chromium in computer %s wrote an unreadable DevToolsActivePort: %q", m.ID, lastLines(res.Stdout, 2))
	}
	hc, err := c.machineDial(ctx, m, port)
	if err != nil {
		return nil, err
	}
	cdp, err := dialCDP(hc, port, path)
	if err != nil {
		return nil, errorf(codeComputerFailed, "cannot reach Chromium's DevTools port in computer %s: %v", m.ID, err)
	}
	b := &machineBrowser{c: c, id: m.ID, dir: d, cdp: cdp, sessions: map[string]string{}}
	if err := b.attach(ctx); err != nil {
		cdp.Close()
		c.browserShell(context.WithoutCancel(ctx), m.ID, "d='"+d+"'\n"+browserKill, 30*time.Second)
		return nil, errorf(codeComputerFailed, "Chromium in computer %s: %v", m.ID, err)
	}
	var bctx context.Context
	bctx, b.cancel = context.WithCancel(c.ctx)
	b.lastUsed.Store(c.now().UnixNano())
	b.wg.Add(1)
	go b.idleLoop(bctx)
	c.browserProgress(m.ID, "Chromium is ready")
	return b, nil
}

// parseDevToolsActivePort reads Chromium's "port\n/devtools/browser/<id>".
func parseDevToolsActivePort(s string) (int, string, bool) {
	lines := strings.Fields(s)
	if len(lines) < 2 {
		return 0, "", false
	}
	port, err := strconv.Atoi(lines[0])
	if err != nil || port < 1 || port > 65535 || !strings.HasPrefix(lines[1], "/devtools/browser/") {
		return 0, "", false
	}
	return port, lines[1], true
}

// attach makes the browser's first page (or a new one) the current tab.
func (b *machineBrowser) attach(ctx context.Context) error {
	pages, err := b.pages(ctx)
	if err != nil {
		return err
	}
	if len(pages) > 0 {
		return b.switchTo(ctx, pages[0].TargetID)
	}
	return b.openTab(ctx)
}

// idleLoop stops the browser once it has been idle for the configured time (on the service's clock).
func (b *machineBrowser) idleLoop(ctx context.Context) {
	defer b.wg.Done()
	t := time.NewTicker(b.c.browserCfg.every())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if b.c.retireIdle(b) {
				return
			}
		}
	}
}

// retireIdle stops b when it is still the machine's browser, not busy and idle long enough.
func (c *computerService) retireIdle(b *machineBrowser) bool {
	c.mu.Lock()
	rt := c.rt[b.id]
	c.mu.Unlock()
	if rt == nil {
		return false
	}
	rt.brMu.Lock()
	idle := c.now().Sub(time.Unix(0, b.lastUsed.Load()))
	if rt.br != b || b.busy.Load() > 0 || idle < c.browserCfg.idle() {
		rt.brMu.Unlock()
		return false
	}
	rt.br = nil
	rt.brMu.Unlock()
	b.cdp.Close()
	c.browserShell(c.ctx, b.id, "d='"+b.dir+"'\n"+browserKill, 30*time.Second)
	c.browserProgress(b.id, fmt.Sprintf("Chromium stopped after %s idle", c.browserCfg.idle()))
	return true
}

// close ends the browser's goroutine and its DevTools connection (not its processes: see closeBrowser
// and BrowserClose).
func (b *machineBrowser) close() {
	if b.cancel != nil {
		b.cancel()
	}
	b.cdp.Close()
	b.wg.Wait()
}

// closeBrowser ends machine rt's browser connection; the machine's stop or destroy ends its processes.
func (c *computerService) closeBrowser(rt *machineRT) {
	rt.brMu.Lock()
	b := rt.br
	rt.br = nil
	rt.brMu.Unlock()
	if b != nil {
		b.close()
	}
}

// endBrowsers stops every machine's browser, processes too, when the service closes (before its exec
// channels go): the machines are adopted by the next server, and an orphaned Chromium would hold a
// machine's memory until its next browser call.
func (c *computerService) endBrowsers() {
	c.mu.Lock()
	rts := make(map[string]*machineRT, len(c.rt))
	for id, rt := range c.rt {
		rts[id] = rt
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for id, rt := range rts {
		rt.brMu.Lock()
		b := rt.br
		rt.brMu.Unlock()
		if b == nil {
			continue
		}
		wg.Go(func() {
			c.closeBrowser(rt)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.browserShell(ctx, id, "d='"+browserDir(id)+"'\n"+browserKill, 10*time.Second)
		})
	}
	wg.Wait()
}

// ---- operations ----

// BrowserStatus says whether machine id has Chromium, which, and whether it is running.
type BrowserStatus struct {
	Installed bool   `json:"installed"`
	Version   string `json:"version,omitempty"`
	Running   bool   `json:"running"`
	URL       string `json:"url,omitempty"`
	Title     string `json:"title,omitempty"`
	Hint      string `json:"hint,omitempty"`
}

func (c *computerService) BrowserStatus(ctx context.Context, id string) (*BrowserStatus, error) {
	m, _, err := c.getLive(ctx, id)
	if err != nil {
		return nil, err
	}
	res, err := c.browserShell(ctx, m.ID, browserRun("", "--version 2>/dev/null"), 30*time.Second)
	if err != nil {
		return nil, err
	}
	st := &BrowserStatus{Installed: res.ExitCode != 3, Version: strings.TrimSpace(lastLines(res.Stdout, 1))}
	if !st.Installed {
		st.Hint = browserHint(m)
		return st, nil
	}
	rt := c.runtime(m.ID)
	rt.brMu.Lock()
	b := rt.br
	rt.brMu.Unlock()
	if b != nil {
		select {
		case <-b.cdp.done():
		default:
			st.Running = true
			if b.op.TryLock() { // a page in the middle of an operation is not described
				st.URL, st.Title, _, _ = b.where(ctx)
				b.op.Unlock()
			}
		}
	}
	return st, nil
}

// GotoResult is the answer of a goto.
type GotoResult struct {
	URL    string `json:"url"`
	Loaded bool   `json:"loaded"`
	Title  string `json:"title"`
	Status int    `json:"status,omitempty"` // the document's HTTP status, when it came over HTTP
	Error  string `json:"error,omitempty"`  // why the page did not load (Chromium's net error)
}

func checkBrowserURL(raw string) error {
	u, err := url.Parse(raw)
	if raw == "" {
		return errorf(codeSpecInvalid, "url: Required").withHint(`send {"url": "http://localhost:8000/"}`)
	}
	if err != nil || !(u.Scheme == "http" || u.Scheme == "https" || raw == "about:blank") || (u.Scheme != "about" && u.Host == "") {
		return errorf(codeSpecInvalid, "url: expected an http or https URL (or about:blank), received %q", raw).
			withHint(`send {"url": "http://localhost:8000/"}`)
	}
	return nil
}

// checkPageTimeout reads a page load's timeoutSec: 1..300, 0 is 30.
func checkPageTimeout(timeoutSec *int) error {
	switch {
	case *timeoutSec == 0:
		*timeoutSec = 30
	case *timeoutSec < 1 || *timeoutSec > 300:
		return errorf(codeSpecInvalid, "timeoutSec: must be between 1 and 300, received %d", *timeoutSec)
	}
	return nil
}

func (c *computerService) BrowserGoto(ctx context.Context, id, rawURL string, timeoutSec int) (*GotoResult, error) {
	if err := checkBrowserURL(rawURL); err != nil {
		return nil, err
	}
	if err := checkPageTimeout(&timeoutSec); err != nil {
		return nil, err
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*GotoResult, error) {
		return b.gotoURL(ctx, rawURL, timeoutSec)
	})
}

// gotoURL opens rawURL in the current tab and waits up to timeoutSec for its load.
func (b *machineBrowser) gotoURL(ctx context.Context, rawURL string, timeoutSec int) (*GotoResult, error) {
	loads, stop := b.cdp.subscribe(b.session, pageLoadEvents...)
	defer stop()
	var nav struct {
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	if err := b.cdp.call(ctx, b.session, "Page.navigate", map[string]any{"url": rawURL}, &nav); err != nil {
		return nil, b.fail(err)
	}
	out := &GotoResult{Error: nav.ErrorText}
	if nav.ErrorText == "" {
		out.Loaded = nav.LoaderID == "" // a same-document navigation has no load
		if !out.Loaded {
			var err error
			if out.Loaded, err = b.awaitLoad(ctx, loads, time.Duration(timeoutSec)*time.Second); err != nil {
				return nil, err
			}
		}
	}
	var err error
	out.URL, out.Title, out.Status, err = b.where(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	return out, nil
}

// pageLoadEvents are the events awaitLoad reads (subscribe to them before starting the navigation).
var pageLoadEvents = []string{"Page.loadEventFired", "Page.frameNavigated", "Page.navigatedWithinDocument"}

// awaitLoad waits up to timeout for the current tab's main frame to finish a navigation: its load
// event, a page restored from the back-forward cache (which fires none), or a same-document move.
// It answers false when the time ran out.
func (b *machineBrowser) awaitLoad(ctx context.Context, events <-chan cdpEvent, timeout time.Duration) (bool, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-events:
			var p struct {
				FrameID string `json:"frameId"`
				Type    string `json:"type"`
				Frame   struct {
					ParentID string `json:"parentId"`
				} `json:"frame"`
			}
			json.Unmarshal(ev.Params, &p)
			switch {
			case ev.Method == "Page.loadEventFired",
				ev.Method == "Page.frameNavigated" && p.Type == "BackForwardCacheRestore" && p.Frame.ParentID == "",
				ev.Method == "Page.navigatedWithinDocument" && p.FrameID == b.target:
				return true, nil
			}
		case <-t.C:
			return false, nil
		case <-b.cdp.done():
			return false, b.fail(errors.New("the browser exited while loading the page"))
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// fail turns a DevTools failure into the API's error.
func (b *machineBrowser) fail(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	select {
	case <-b.cdp.done():
		return errorf(codeComputerFailed, "the browser of computer %s exited: %v", b.id, err).withHint("retry: the next call starts it again")
	default:
	}
	return errorf(codeToolError, "browser: %v", err)
}

// eval evaluates expression in the page (a promise is awaited) and decodes its JSON value into out.
func (b *machineBrowser) eval(ctx context.Context, expression string, out any) error {
	return b.script(ctx, "Runtime.evaluate", map[string]any{"expression": expression, "returnByValue": true, "awaitPromise": true}, out)
}

// script calls a Runtime method that runs JavaScript in the page (evaluate, callFunctionOn) and decodes
// the JSON value it answers into out (nil: ignored); a script that threw is an error saying so.
func (b *machineBrowser) script(ctx context.Context, method string, params map[string]any, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.cdp.call(ctx, b.session, method, params, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return errors.New("the page threw: " + r.ExceptionDetails.Text)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// where is the page's URL, title and the HTTP status of its document (0 when unknown).
func (b *machineBrowser) where(ctx context.Context) (string, string, int, error) {
	var v struct {
		URL    string `json:"u"`
		Title  string `json:"t"`
		Status int    `json:"s"`
	}
	err := b.eval(ctx, `(() => { const n = performance.getEntriesByType("navigation")[0];
  return {u: location.href, t: document.title, s: (n && n.responseStatus) || 0}; })()`, &v)
	return v.URL, v.Title, v.Status, err
}

// SnapshotNode is one node of the accessibility tree a snapshot shows.
type SnapshotNode struct {
	Ref   string `json:"ref"`
	Role  string `json:"role"`
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// SnapshotResult is the page's accessibility tree, flattened to the nodes worth acting on or reading.
type SnapshotResult struct {
	URL       string         `json:"url"`
	Nodes     []SnapshotNode `json:"nodes"`
	Truncated bool           `json:"truncated,omitempty"`
}

func (c *computerService) BrowserSnapshot(ctx context.Context, id string, limit int) (*SnapshotResult, error) {
	if err := checkSnapshotLimit(&limit); err != nil {
		return nil, err
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*SnapshotResult, error) {
		return b.snapshot(ctx, limit)
	})
}

func checkSnapshotLimit(limit *int) error {
	switch {
	case *limit == 0:
		*limit = browserSnapshotDflt
	case *limit < 1 || *limit > browserSnapshotMax:
		return errorf(codeSpecInvalid, "limit: must be between 1 and %d, received %d", browserSnapshotMax, *limit)
	}
	return nil
}

type axValue struct {
	Value json.RawMessage `json:"value"`
}

func (v *axValue) text() string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(v.Value, &s) == nil {
		return s
	}
	return strings.Trim(string(v.Value), `"`)
}

// skippedRoles carry no meaning of their own; interactiveRoles are shown even without a name.
var (
	skippedRoles     = map[string]bool{"none": true, "generic": true, "InlineTextBox": true, "LineBreak": true, "presentation": true, "RootWebArea": false}
	interactiveRoles = map[string]bool{"button": true, "link": true, "textbox": true, "checkbox": true, "radio": true,
		"combobox": true, "listbox": true, "option": true, "searchbox": true, "slider": true, "spinbutton": true,
		"switch": true, "tab": true, "menuitem": true, "treeitem": true}
)

func (b *machineBrowser) snapshot(ctx context.Context, limit int) (*SnapshotResult, error) {
	var tree struct {
		Nodes []struct {
			NodeID   string   `json:"nodeId"`
			ParentID string   `json:"parentId"`
			Ignored  bool     `json:"ignored"`
			Role     *axValue `json:"role"`
			Name     *axValue `json:"name"`
			Value    *axValue `json:"value"`
			Backend  int64    `json:"backendDOMNodeId"`
		} `json:"nodes"`
	}
	if err := b.cdp.call(ctx, b.session, "Accessibility.getFullAXTree", map[string]any{}, &tree); err != nil {
		return nil, b.fail(err)
	}
	names := map[string]string{}
	for _, n := range tree.Nodes {
		names[n.NodeID] = n.Name.text()
	}
	out := &SnapshotResult{Nodes: []SnapshotNode{}}
	for _, n := range tree.Nodes {
		role, name, value := n.Role.text(), strings.Join(strings.Fields(n.Name.text()), " "), n.Value.text()
		if n.Ignored || skippedRoles[role] || n.Backend == 0 || role == "RootWebArea" {
			continue
		}
		if name == "" && value == "" && !interactiveRoles[role] {
			continue
		}
		if role == "StaticText" && strings.Join(strings.Fields(names[n.ParentID]), " ") == name {
			continue // the text of its parent's name (a button's label, a link's text)
		}
		if len(out.Nodes) == limit {
			out.Truncated = true
			break
		}
		out.Nodes = append(out.Nodes, SnapshotNode{Ref: "e" + strconv.FormatInt(n.Backend, 10), Role: role, Name: name, Value: value})
	}
	loader, err := b.loader(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	b.refs, b.refsLoader = map[int64]bool{}, loader
	for _, n := range out.Nodes {
		id, _ := strconv.ParseInt(n.Ref[1:], 10, 64)
		b.refs[id] = true
	}
	out.URL, _, _, err = b.where(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	return out, nil
}

// loader is the id of the document now in the page's main frame.
func (b *machineBrowser) loader(ctx context.Context) (string, error) {
	var ft struct {
		FrameTree struct {
			Frame struct {
				LoaderID string `json:"loaderId"`
			} `json:"frame"`
		} `json:"frameTree"`
	}
	err := b.cdp.call(ctx, b.session, "Page.getFrameTree", nil, &ft)
	return ft.FrameTree.Frame.LoaderID, err
}

// checkRef says whether ref is one of the last snapshot's, on the document it was taken of.
func (b *machineBrowser) checkRef(ctx context.Context, ref string, node int64) error {
	if !b.refs[node] {
		return staleRef(ref, errors.New("it is not in the last snapshot"))
	}
	loader, err := b.loader(ctx)
	if err != nil {
		return b.fail(err)
	}
	if loader != b.refsLoader {
		return staleRef(ref, errors.New("the page has changed documents since the snapshot"))
	}
	return nil
}

// backendID reads a ref ("e42").
func backendID(ref string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(ref, "e"), 10, 64)
	if !strings.HasPrefix(ref, "e") || err != nil || n <= 0 {
		return 0, errorf(codeSpecInvalid, "ref: expected a ref of the last snapshot such as \"e42\", received %q", ref)
	}
	return n, nil
}

// staleRef is the error of a ref the page no longer has.
func staleRef(ref string, err error) error {
	return errorf(codeToolError, "ref %s is not on the page any more (%v)", ref, err).withHint("take a new snapshot and use its refs")
}

// act runs do on the page, then waits for a navigation it started (if any) to load and answers the
// page's snapshot.
func (c *computerService) act(ctx context.Context, id string, do func(b *machineBrowser) error) (*SnapshotResult, error) {
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*SnapshotResult, error) {
		events, stop := b.cdp.subscribe(b.session, "Page.frameStartedLoading", "Page.loadEventFired")
		defer stop()
		if err := do(b); err != nil {
			return nil, err
		}
		b.settle(ctx, events)
		return b.snapshot(ctx, browserSnapshotDflt)
	})
}

// settle waits briefly for the main frame to start loading after an action and, if it did, for its load.
func (b *machineBrowser) settle(ctx context.Context, events <-chan cdpEvent) {
	started := false
	wait := time.NewTimer(700 * time.Millisecond)
	defer wait.Stop()
	for {
		select {
		case ev := <-events:
			switch ev.Method {
			case "Page.frameStartedLoading":
				var p struct {
					FrameID string `json:"frameId"`
				}
				if json.Unmarshal(ev.Params, &p) == nil && p.FrameID == b.target && !started {
					started = true
					wait.Reset(30 * time.Second)
				}
			case "Page.loadEventFired":
				if started {
					return
				}
			}
		case <-wait.C:
			return
		case <-b.cdp.done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// center scrolls node into view and returns the middle of its first box.
func (b *machineBrowser) center(ctx context.Context, ref string, node int64) (float64, float64, error) {
	if err := b.cdp.call(ctx, b.session, "DOM.scrollIntoViewIfNeeded", map[string]any{"backendNodeId": node}, nil); err != nil {
		return 0, 0, staleRef(ref, err)
	}
	var q struct {
		Quads [][]float64 `json:"quads"`
	}
	if err := b.cdp.call(ctx, b.session, "DOM.getContentQuads", map[string]any{"backendNodeId": node}, &q); err != nil {
		return 0, 0, staleRef(ref, err)
	}
	if len(q.Quads) == 0 || len(q.Quads[0]) != 8 {
		return 0, 0, errorf(codeToolError, "ref %s is not visible on the page (it has no box)", ref).withHint("scroll, or pick another ref of the last snapshot")
	}
	p := q.Quads[0]
	return (p[0] + p[2] + p[4] + p[6]) / 4, (p[1] + p[3] + p[5] + p[7]) / 4, nil
}

func (c *computerService) BrowserClick(ctx context.Context, id, ref string) (*SnapshotResult, error) {
	return c.actOn(ctx, id, ref, func(b *machineBrowser, node int64) error {
		return b.mouse(ctx, ref, node, "mouseMoved", "mousePressed", "mouseReleased")
	})
}

func (c *computerService) BrowserType(ctx context.Context, id, ref, text string, submit bool) (*SnapshotResult, error) {
	return c.actOn(ctx, id, ref, func(b *machineBrowser, node int64) error {
		if err := b.cdp.call(ctx, b.session, "DOM.focus", map[string]any{"backendNodeId": node}, nil); err != nil {
			return staleRef(ref, err)
		}
		// What is typed replaces the field's value, as a person selecting it all and typing would.
		if err := b.callOn(ctx, ref, node, "function() { if (typeof this.select === 'function') this.select(); }", nil, nil); err != nil {
			return err
		}
		if err := b.cdp.call(ctx, b.session, "Input.insertText", map[string]any{"text": text}, nil); err != nil {
			return b.fail(err)
		}
		if !submit {
			return nil
		}
		for _, typ := range []string{"keyDown", "keyUp"} {
			ev := map[string]any{"type": typ, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
			if typ == "keyDown" {
				ev["text"] = "\r"
			}
			if err := b.cdp.call(ctx, b.session, "Input.dispatchKeyEvent", ev, nil); err != nil {
				return b.fail(err)
			}
		}
		return nil
	})
}

// BrowserScreenshot is a PNG of the viewport, or of the whole page.
func (c *computerService) BrowserScreenshot(ctx context.Context, id string, fullPage bool) ([]byte, error) {
	return withBrowser(c, ctx, id, func(b *machineBrowser) ([]byte, error) {
		params := map[string]any{"format": "png"}
		if fullPage {
			var lm struct {
				Content struct {
					Width  float64 `json:"width"`
					Height float64 `json:"height"`
				} `json:"cssContentSize"`
			}
			if err := b.cdp.call(ctx, b.session, "Page.getLayoutMetrics", nil, &lm); err != nil {
				return nil, b.fail(err)
			}
			params["captureBeyondViewport"] = true
			params["clip"] = map[string]any{"x": 0, "y": 0, "width": max(lm.Content.Width, 1), "height": min(max(lm.Content.Height, 1), 16384), "scale": 1}
		}
		var shot struct {
			Data string `json:"data"`
		}
		if err := b.cdp.call(ctx, b.session, "Page.captureScreenshot", params, &shot); err != nil {
			return nil, b.fail(err)
		}
		png, err := base64.StdEncoding.DecodeString(shot.Data)
		if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
			return nil, errorf(codeToolError, "the browser's screenshot is not a PNG")
		}
		return png, nil
	})
}

// BrowserClose stops machine id's browser (its processes too); its profile stays.
func (c *computerService) BrowserClose(ctx context.Context, id string) error {
	m, _, err := c.getLive(ctx, id)
	if err != nil {
		return err
	}
	c.closeBrowser(c.runtime(m.ID))
	res, err := c.browserShell(ctx, m.ID, "d='"+browserDir(m.ID)+"'\n"+browserKill, 30*time.Second)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return errorf(codeComputerFailed, "stopping the browser of computer %s: %s", m.ID, lastLines(res.Stderr, 4))
	}
	c.browserProgress(m.ID, "Chromium stopped")
	return nil
}

// ---- handlers ----

func (s *server) handleBrowserStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.computers.BrowserStatus(r.Context(), r.PathValue("id"))
	return reply(w, http.StatusOK, st, err)
}

func (s *server) handleBrowserGoto(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		URL        string `json:"url"`
		TimeoutSec int    `json:"timeoutSec"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	res, err := s.computers.BrowserGoto(r.Context(), r.PathValue("id"), body.URL, body.TimeoutSec)
	return reply(w, http.StatusOK, res, err)
}

func (s *server) handleBrowserSnapshot(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Limit int `json:"limit"`
	}
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(raw))) > 0 { // the body is optional: {} and nothing are the defaults
		if err := decodeBytes(raw, &body); err != nil {
			return err
		}
	}
	res, err := s.computers.BrowserSnapshot(r.Context(), r.PathValue("id"), body.Limit)
	return reply(w, http.StatusOK, res, err)
}

func (s *server) handleBrowserClick(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Ref string `json:"ref"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	res, err := s.computers.BrowserClick(r.Context(), r.PathValue("id"), body.Ref)
	return reply(w, http.StatusOK, res, err)
}

func (s *server) handleBrowserType(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Ref    string `json:"ref"`
		Text   string `json:"text"`
		Submit bool   `json:"submit"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	res, err := s.computers.BrowserType(r.Context(), r.PathValue("id"), body.Ref, body.Text, body.Submit)
	return reply(w, http.StatusOK, res, err)
}

func (s *server) handleBrowserScreenshot(w http.ResponseWriter, r *http.Request) error {
	full := r.URL.Query().Get("fullPage")
	png, err := s.computers.BrowserScreenshot(r.Context(), r.PathValue("id"), full == "1" || full == "true")
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(png)
	return err
}

func (s *server) handleBrowserClose(w http.ResponseWriter, r *http.Request) error {
	if err := s.computers.BrowserClose(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// doctorBrowser is the doctor's view of the in-machine browser: the host's Chromium (which sandbox and
// local machines run), the browser flavor's image on the selected engine, and what is missing with how
// to get it.
type doctorBrowser struct {
	Host         string   `json:"host"` // the host's Chromium, "" when there is none
	Image        string   `json:"image,omitempty"`
	ImagePresent bool     `json:"imagePresent"`
	Missing      []string `json:"missing"`
}

func (c *computerService) browserDoctor(images []doctorImage) doctorBrowser {
	d := doctorBrowser{Missing: []string{}}
	for _, name := range browserBinaries {
		if p, err := exec.LookPath(name); err == nil {
			d.Host = p
			break
		}
	}
	if d.Host == "" {
		d.Missing = append(d.Missing, "the host has no Chromium, which sandbox and local machines run: apt-get install chromium (Debian)")
	}
	for _, im := range images {
		if im.Flavor == "browser" {
			d.Image, d.ImagePresent = im.Image, im.Present
			if !im.Present {
				d.Missing = append(d.Missing, fmt.Sprintf("%s has no image %s for the browser flavor: build it offline with scripts/test-image.sh --flavor browser (Debian's chromium from the Debian mirror), or set images: {browser: <image with chromium>} in config.yaml", im.Provider, im.Image))
			}
		}
	}
	return d
}

// withBrowser runs do on machine id's browser (started when needed), holding it for the operation.
func withBrowser[T any](c *computerService, ctx context.Context, id string, do func(b *machineBrowser) (T, error)) (T, error) {
	b, err := c.browser(ctx, id)
	if err != nil {
		var zero T
		return zero, err
	}
	defer b.release()
	return do(b)
}
