package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// browserImage is the browser flavor's image the engine tests use (scripts/test-image.sh --flavor browser).
const browserImage = "agentd-test:browser"

// requireBrowser skips a browser test whose Chromium is missing here (the browser image on an engine,
// the host's chromium on the sandbox); with AGENT_TEST_BROWSER=1 (CI) that is a failure instead.
func requireBrowser(t *testing.T, prov string) {
	t.Helper()
	requireProvider(t, prov)
	var missing string
	switch prov {
	case "docker", "podman":
		check := map[string][]string{"docker": {"image", "inspect", browserImage}, "podman": {"image", "exists", browserImage}}[prov]
		if exec.Command(prov, check...).Run() != nil {
			missing = prov + " has no image " + browserImage + ": build it with scripts/test-image.sh --flavor browser"
		}
	default:
		if _, err := exec.LookPath("chromium"); err != nil {
			missing = "the host has no chromium (apt-get install chromium)"
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("AGENT_TEST_BROWSER") == "1" {
		t.Fatalf("%s (AGENT_TEST_BROWSER=1)", missing)
	}
	t.Skipf("%s (set AGENT_TEST_BROWSER=1 to make this a failure)", missing)
}

func withBrowserImage(c *testSetup) { c.Images["browser"] = browserImage }

// The pages the machine serves: a form, a button that changes the page, a link, and text a reader must
// never see (script, style, template).
var browserTestPages = map[string]string{
	"index.html": `<!doctype html><html><head><title>Shop</title><style>.x{color:red} STYLETEXT</style>
<script>var hidden = "SCRIPTTEXT";</script></head><body>
<h1 id="h">Welcome</h1>
<template><p>TEMPLATETEXT</p></template>
<button id="change" onclick="document.getElementById('h').textContent = 'Changed by the button'">Change</button>
<form action="/result.html" method="get">
<label for="name">Your name</label> <input id="name" name="name" type="text">
<button type="submit">Send</button>
</form>
<p><a href="/about.html">About us</a></p>
</body></html>`,
	"result.html": `<!doctype html><html><head><title>Result</title></head><body>
<p id="r">waiting</p>
<script>document.getElementById('r').textContent = 'Hello, ' + new URLSearchParams(location.search).get('name');</script>
</body></html>`,
	"about.html": `<!doctype html><html><head><title>About</title></head><body><p>About this shop</p></body></html>`,
}

// serveTestPages writes the pages into machine id and serves them on port with python3, answering once up.
func serveTestPages(e *testServer, id string, port int) {
	e.t.Helper()
	for name, body := range browserTestPages {
		r := e.exec(id, map[string]any{"cmd": "mkdir -p /work/www && cat > /work/www/" + name, "stdin": body})
		if r.ExitCode != 0 {
			e.t.Fatalf("writing %s: %+v", name, r)
		}
	}
	if r := e.exec(id, map[string]any{"cmd": fmt.Sprintf("cd /work/www && setsid nohup python3 -m http.server %d >/dev/null 2>&1 &", port)}); r.ExitCode != 0 {
		e.t.Fatalf("starting the page server: %+v", r)
	}
	eventually(e.t, "the page server answers in the machine", func() bool {
		r := e.do("POST", "/v1/computers/"+id+"/browse", map[string]any{"url": fmt.Sprintf("http://localhost:%d/", port), "timeoutSec": 5})
		return r.status == 200
	})
}

func findNode(nodes []SnapshotNode, role, name string) (SnapshotNode, bool) {
	for _, n := range nodes {
		if n.Role == role && strings.Contains(n.Name, name) {
			return n, true
		}
	}
	return SnapshotNode{}, false
}

// hostBrowserPids lists the host's processes of machine id's browser (its profile is in every command line).
func hostBrowserPids(id string) []string {
	mark := "--user-data-dir=" + browserDir(id) + "/profile"
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(mark)) {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// TestBrowserInMachine (issue 28): a real Chromium in a machine on docker and on the sandbox reads and
// drives a page the machine serves itself: browse reads it as text (no script, style or template), goto,
// snapshot, a button that changes the page, typing into a form and clicking submit (the next snapshot
// shows the result), a screenshot that is a PNG of the viewport; the egress rules refuse a denied host to
// the browser; a killed browser starts again on next use; an idle one stops on the service's clock; and
// destroy leaves no Chromium process.
func TestBrowserInMachine(t *testing.T) {
	for _, prov := range []string{"docker", "podman", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			requireBrowser(t, prov)
			e := newTestServer(t, withHostEnv, withBrowserImage)
			e.s.computers.browserCfg.tick = 20 * time.Millisecond
			m := e.create(map[string]any{"provider": prov, "flavor": "browser", "idleTimeoutSec": 0, "memoryMb": 2048,
				"network": map[string]any{"mode": "egress", "deny": []string{"denied.example"}}})
			destroyed := false
			defer func() {
				if !destroyed {
					e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
				}
			}()
			t0 := time.Now()
			step := func(what string) { t.Logf("%6.1fs %s", time.Since(t0).Seconds(), what) }
			base := "http://localhost:8000/"
			serveTestPages(e, m.ID, 8000)
			step("pages served")

			// browse: fetched from inside the machine (localhost is the machine's own), read as text.
			var br BrowseResult
			e.call("POST", "/v1/computers/"+m.ID+"/browse", map[string]any{"url": base}, 200, &br)
			if br.Status != 200 || br.Title != "Shop" || !strings.Contains(br.Text, "Welcome") || !strings.Contains(br.ContentType, "html") {
				t.Fatalf("browse: %+v", br)
			}
			for _, hidden := range []string{"SCRIPTTEXT", "STYLETEXT", "TEMPLATETEXT"} {
				if strings.Contains(br.Text, hidden) {
					t.Fatalf("browse text shows %s: %q", hidden, br.Text)
				}
			}
			if len(br.Links) != 1 || br.Links[0] != (pageLink{Text: "About us", Href: base + "about.html"}) {
				t.Fatalf("browse links: %+v", br.Links)
			}
			e.wantError("POST", "/v1/computers/"+m.ID+"/browse", map[string]any{"url": "http://denied.example/"}, 403, codeExecDenied)

			var st BrowserStatus
			e.call("GET", "/v1/computers/"+m.ID+"/browser/status", nil, 200, &st)
			if !st.Installed || !strings.Contains(st.Version, "Chromium") || st.Running {
				t.Fatalf("status before first use: %+v", st)
			}

			step("status")
			var g GotoResult
			e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": base}, 200, &g)
			if !g.Loaded || g.Title != "Shop" || g.Status != 200 || g.URL != base {
				t.Fatalf("goto: %+v", g)
			}
			var snap SnapshotResult
			e.call("POST", "/v1/computers/"+m.ID+"/browser/snapshot", map[string]any{}, 200, &snap)
			change, ok1 := findNode(snap.Nodes, "button", "Change")
			box, ok2 := findNode(snap.Nodes, "textbox", "Your name")
			send, ok3 := findNode(snap.Nodes, "button", "Send")
			_, ok4 := findNode(snap.Nodes, "link", "About us")
			if !ok1 || !ok2 || !ok3 || !ok4 {
				t.Fatalf("snapshot lacks the page's controls: %+v", snap.Nodes)
			}

			var after SnapshotResult
			e.call("POST", "/v1/computers/"+m.ID+"/browser/click", map[string]any{"ref": change.Ref}, 200, &after)
			if _, ok := findNode(after.Nodes, "heading", "Changed by the button"); !ok {
				t.Fatalf("after clicking Change: %+v", after.Nodes)
			}
			e.call("POST", "/v1/computers/"+m.ID+"/browser/type", map[string]any{"ref": box.Ref, "text": "Ada"}, 200, &after)
			if n, _ := findNode(after.Nodes, "textbox", "Your name"); n.Value != "Ada" {
				t.Fatalf("after typing: %+v", after.Nodes)
			}
			e.call("POST", "/v1/computers/"+m.ID+"/browser/click", map[string]any{"ref": send.Ref}, 200, &after)
			e.call("POST", "/v1/computers/"+m.ID+"/browser/snapshot", nil, 200, &snap)
			if !strings.Contains(snap.URL, "result.html?name=Ada") {
				t.Fatalf("after submitting, the page is %s", snap.URL)
			}
			if _, ok := findNode(snap.Nodes, "StaticText", "Hello, Ada"); !ok {
				t.Fatalf("the result page's snapshot: %+v", snap.Nodes)
			}
			// A ref of the page that is gone is a clear error, not a click somewhere.
			e.wantError("POST", "/v1/computers/"+m.ID+"/browser/click", map[string]any{"ref": send.Ref}, 500, codeToolError)
			e.wantError("POST", "/v1/computers/"+m.ID+"/browser/click", map[string]any{"ref": "nope"}, 422, codeSpecInvalid)

			step("form submitted")
			shot := e.do("GET", "/v1/computers/"+m.ID+"/browser/screenshot", nil)
			img, err := png.Decode(bytes.NewReader(shot.body))
			if shot.status != 200 || err != nil || img.Bounds().Dx() != browserWidth || img.Bounds().Dy() != browserHeight {
				t.Fatalf("screenshot: status %d, %v, %v", shot.status, err, img)
			}

			step("screenshot")
			// The browser's traffic goes through the machine's egress rules.
			e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "http://denied.example/", "timeoutSec": 20}, 200, &g)
			if g.Status == 200 || (g.Error == "" && g.Status != 403) {
				t.Fatalf("goto a denied host: %+v", g)
			}
			eventually(t, "an egress_refused event for denied.example", func() bool {
				evs, _ := e.s.hub.history()
				for _, ev := range evs {
					if p, ok := ev.Payload.(map[string]any); ok && ev.Type == "egress_refused" && p["computerId"] == m.ID && p["host"] == "denied.example" {
						return true
					}
				}
				return false
			})

			step("egress refused")
			// A crashed browser starts again on next use.
			if r := e.exec(m.ID, map[string]any{"cmd": "d='" + browserDir(m.ID) + "'\n" + browserKill}); r.ExitCode != 0 {
				t.Fatalf("killing chromium: %+v", r)
			}
			eventually(t, "the status sees the browser gone", func() bool {
				e.call("GET", "/v1/computers/"+m.ID+"/browser/status", nil, 200, &st)
				return !st.Running
			})
			e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": base + "about.html"}, 200, &g)
			if !g.Loaded || g.Title != "About" {
				t.Fatalf("goto after a crash: %+v", g)
			}

			step("restarted after a crash")
			// Idle for longer than browserIdleAfter on the service's clock: stopped, processes and all.
			e.s.computers.setNow(func() time.Time { return time.Now().Add(browserIdleAfter + time.Minute) })
			eventually(t, "the idle browser stops", func() bool {
				e.call("GET", "/v1/computers/"+m.ID+"/browser/status", nil, 200, &st)
				return !st.Running && !strings.Contains(e.processes(m.ID), browserDir(m.ID))
			})
			e.s.computers.setNow(time.Now)

			step("stopped when idle")
			// Destroy leaves no Chromium process.
			e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": base}, 200, &g)
			if len(hostBrowserPids(m.ID)) == 0 {
				t.Fatalf("no host process carries the browser's profile %s", browserDir(m.ID))
			}
			e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			destroyed = true
			step("destroyed")
			eventually(t, "no chromium process is left after destroy", func() bool { return len(hostBrowserPids(m.ID)) == 0 })
		})
	}
}

func TestParsePage(t *testing.T) {
	base, _ := url.Parse("http://localhost:8000/dir/")
	pg := parsePage([]byte(browserTestPages["index.html"]+`<a href="javascript:x()">js</a><a href="../up.html">Up <b>there</b></a>`), base)
	if pg.title != "Shop" || strings.Contains(pg.text, "SCRIPTTEXT") || strings.Contains(pg.text, "TEMPLATETEXT") || !strings.Contains(pg.text, "Welcome") {
		t.Fatalf("page: %+v", pg)
	}
	want := []pageLink{{"About us", "http://localhost:8000/about.html"}, {"Up there", "http://localhost:8000/up.html"}}
	if fmt.Sprint(pg.links) != fmt.Sprint(want) {
		t.Fatalf("links %v, want %v", pg.links, want)
	}
	var many strings.Builder
	for i := range 400 {
		fmt.Fprintf(&many, `<a href="/%d">%d</a>`, i, i)
	}
	if n := len(parsePage([]byte(many.String()), nil).links); n != browseMaxLinks {
		t.Fatalf("%d links kept, want %d", n, browseMaxLinks)
	}
}

func FuzzParsePage(f *testing.F) {
	for _, p := range browserTestPages {
		f.Add([]byte(p))
	}
	f.Add([]byte("<a href=x>unclosed<script>y"))
	base, _ := url.Parse("http://localhost/")
	f.Fuzz(func(t *testing.T, b []byte) {
		pg := parsePage(b, base)
		if len(pg.links) > browseMaxLinks || pg.links == nil {
			t.Fatalf("links: %d", len(pg.links))
		}
	})
}

func FuzzDevToolsActivePort(f *testing.F) {
	f.Add("37529\n/devtools/browser/a7909c13")
	f.Add("0\n/x")
	f.Fuzz(func(t *testing.T, s string) {
		port, path, ok := parseDevToolsActivePort(s)
		if ok && (port < 1 || port > 65535 || !strings.HasPrefix(path, "/devtools/browser/")) {
			t.Fatalf("accepted %q → %d %q", s, port, path)
		}
	})
}

// TestBrowserAgentRun (issue 28): an agent with a scripted model does the page's whole round through the
// browser tools on a real machine: it serves the pages, opens them, reads the snapshot's lines
// (`e42 button "Send"`), types into the form and clicks submit by ref, reads the result, and saves a
// screenshot in /work.
func TestBrowserAgentRun(t *testing.T) {
	requireBrowser(t, "docker")
	e := newTestServer(t, withHostEnv, withBrowserImage)
	var pages strings.Builder
	for name, body := range browserTestPages {
		fmt.Fprintf(&pages, "cat > %s <<'EOF'\n%s\nEOF\n", name, body)
	}
	setup := "mkdir -p /work/www && cd /work/www\n" + pages.String() + `setsid nohup python3 -m http.server 8000 >/dev/null 2>&1 &
python3 -c '
import time, urllib.request
for i in range(300):
    try:
        urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2); print("up"); break
    except Exception:
        time.sleep(0.1)
'`
	// refIn finds the ref of role "name" in the last tool result the model was sent.
	refIn := func(req ChatRequest, role, name string) string {
		msgs := req.Messages
		last := msgs[len(msgs)-1].Content[0].Content
		for _, line := range strings.Split(last, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[1] == role && strings.Contains(line, `"`+name+`"`) {
				return f[0]
			}
		}
		t.Errorf("no %s %q in the tool result %q", role, name, last)
		return "e0"
	}
	m := &fakeModel{}
	m.script = func(_ context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		switch n {
		case 0:
			return toolResp(call("c0", "shell", map[string]any{"command": setup})), nil
		case 1:
			return toolResp(call("c1", "browser_goto", map[string]any{"url": "http://localhost:8000/"})), nil
		case 2:
			return toolResp(call("c2", "browser_snapshot", map[string]any{})), nil
		case 3:
			return toolResp(call("c3", "browser_type", map[string]any{"ref": refIn(req, "textbox", "Your name"), "text": "Grace"})), nil
		case 4:
			return toolResp(call("c4", "browser_click", map[string]any{"ref": refIn(req, "button", "Send")})), nil
		case 5:
			return toolResp(call("c5", "browser_snapshot", map[string]any{})), nil
		case 6:
			return toolResp(call("c6", "browser_screenshot", map[string]any{})), nil
		}
		return textResp("done"), nil
	}
	e.s.runs.Close()
	e.s.runs = newRunService(runDeps{store: e.s.store, hub: e.s.hub, models: m, computers: e.s.computers,
		now: time.Now, log: e.s.log, getenv: os.Getenv, home: t.TempDir(), metrics: e.s.metrics})
	e.putAgent(testSpec("surfer", func(sp *AgentSpec) {
		sp.Tools = []string{"computer", "browser"}
		sp.Computer = ComputerSpec{Provider: "docker", Flavor: "browser", MemoryMB: 2048, Network: NetworkSpec{Mode: "egress"}}
	}))
	res := e.run("surfer", map[string]any{"input": "check the form"})
	if res["stopReason"] != "complete" {
		t.Fatalf("run: %v", res)
	}
	reqs := m.requests()
	result := func(step int) string { msgs := reqs[step].Messages; return msgs[len(msgs)-1].Content[0].Content }
	if !strings.Contains(result(6), `StaticText "Hello, Grace"`) || !strings.Contains(result(6), "result.html?name=Grace") {
		t.Fatalf("the snapshot after submitting: %q", result(6))
	}
	shot := result(7)
	i := strings.Index(shot, "/work/")
	if !strings.HasPrefix(shot, "saved a ") || i < 0 {
		t.Fatalf("screenshot result: %q", shot)
	}
	ms, _ := e.s.computers.list(context.Background(), false)
	if len(ms) != 1 {
		t.Fatalf("machines: %+v", ms)
	}
	if out := e.sh(ms[0].ID, "head -c 8 "+strings.TrimSpace(shot[i:])+" | od -c | head -1"); !strings.Contains(out, "P   N   G") {
		t.Fatalf("the screenshot file is not a PNG: %q", out)
	}
}

// TestBrowserMissing (issue 28): a machine without Chromium says so and how to get it (status, goto),
// and so does the doctor.
func TestBrowserMissing(t *testing.T) {
	requireProvider(t, "docker")
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "docker", "idleTimeoutSec": 0}) // the base image: no chromium
	defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	var st BrowserStatus
	e.call("GET", "/v1/computers/"+m.ID+"/browser/status", nil, 200, &st)
	if st.Installed || st.Running || !strings.Contains(st.Hint, "scripts/test-image.sh --flavor browser") {
		t.Fatalf("status without chromium: %+v", st)
	}
	body := e.wantError("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "http://localhost:1/"}, 501, codeNotImplemented)
	if !strings.Contains(fmt.Sprint(body), "flavor browser") {
		t.Fatalf("goto without chromium: %v", body)
	}
	e.wantError("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "file:///etc/passwd"}, 422, codeSpecInvalid)
	e.wantError("POST", "/v1/computers/"+m.ID+"/browser/snapshot", map[string]any{"limit": 5001}, 422, codeSpecInvalid)
	e.wantError("POST", "/v1/computers/"+m.ID+"/browse", map[string]any{"url": "http://localhost/", "maxBytes": 10}, 422, codeSpecInvalid)

	d := e.s.computers.browserDoctor([]doctorImage{{Flavor: "browser", Image: browserImage, Provider: "docker"}})
	if len(d.Missing) == 0 || !strings.Contains(strings.Join(d.Missing, "\n"), "scripts/test-image.sh --flavor browser") {
		t.Fatalf("doctor without the image: %+v", d)
	}
	rep := e.call("GET", "/v1/doctor", nil, 200, nil).json(t)
	if _, ok := rep["browser"].(map[string]any); !ok {
		t.Fatalf("the doctor has no browser section: %v", rep["browser"])
	}
}

// FuzzCDPMessage: whatever the browser sends, the reader routes or drops it without panicking, and an
// answer reaches only the caller waiting for its id.
func FuzzCDPMessage(f *testing.F) {
	f.Add([]byte(`{"id":1,"result":{"frameId":"x"}}`))
	f.Add([]byte(`{"id":1,"error":{"code":-32000,"message":"No node"}}`))
	f.Add([]byte(`{"method":"Page.loadEventFired","params":{},"sessionId":"s"}`))
	f.Add([]byte(`{"id":"1"}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ch := make(chan cdpAnswer, 1)
		c := &cdpConn{pending: map[int64]chan cdpAnswer{1: ch}, subs: map[*cdpSub]struct{}{}}
		evs, stop := c.subscribe("s", "Page.loadEventFired")
		defer stop()
		c.handle(b)
		c.handle(b) // twice: a repeated answer finds nobody waiting
		if len(ch) > 1 || len(evs) > 2 {
			t.Fatalf("routed %d answers, %d events", len(ch), len(evs))
		}
		if _, waiting := c.pending[1]; len(ch) == 1 && waiting {
			t.Fatal("an answered call is still waiting")
		}
	})
}

// TestBrowserEndsWithServer (issue 28): a server that shuts down leaves its machines running for the
// next one, but not their Chromium: nothing would drive it, and it would hold the machine's memory.
func TestBrowserEndsWithServer(t *testing.T) {
	requireBrowser(t, "docker")
	e := newTestServer(t, withHostEnv, withBrowserImage)
	m := e.create(map[string]any{"provider": "docker", "flavor": "browser", "idleTimeoutSec": 0, "memoryMb": 2048})
	p := e.s.computers.providerByName("docker")
	defer p.destroy(context.Background(), &m)
	e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "about:blank"}, 200, nil)
	if len(hostBrowserPids(m.ID)) == 0 {
		t.Fatal("no chromium process for the machine")
	}
	e.keep = true
	e.close()
	if st, err := p.status(context.Background(), &m); err != nil || st != "running" {
		t.Fatalf("the machine after the server's shutdown: %q %v", st, err)
	}
	eventually(t, "no chromium left in the machine after the server's shutdown", func() bool { return len(hostBrowserPids(m.ID)) == 0 })
}

// TestKubernetesBrowser (issue 28): on Kubernetes the browser flavor's image runs Chromium in the pod
// (.ci/run imports agentd-test:browser into the test cluster): a page served in the pod is opened,
// read as a snapshot, typed into and submitted, and the result read.
func TestKubernetesBrowser(t *testing.T) {
	requireKubernetes(t)
	defer checkNoKubeLeaks(t)
	e := newTestServer(t, withHostEnv, withBrowserImage)
	m := e.create(map[string]any{"provider": "kubernetes", "flavor": "browser", "idleTimeoutSec": 0, "memoryMb": 2048})
	defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	if m.Image != browserImage {
		t.Fatalf("the pod's image is %q, want the browser flavor's %s", m.Image, browserImage)
	}
	serveTestPages(e, m.ID, 8000)
	var g GotoResult
	e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "http://localhost:8000/"}, 200, &g)
	if !g.Loaded || g.Title != "Shop" || g.Status != 200 {
		t.Fatalf("goto: %+v", g)
	}
	var snap SnapshotResult
	e.call("POST", "/v1/computers/"+m.ID+"/browser/snapshot", map[string]any{}, 200, &snap)
	box, ok1 := findNode(snap.Nodes, "textbox", "Your name")
	send, ok2 := findNode(snap.Nodes, "button", "Send")
	if _, ok3 := findNode(snap.Nodes, "heading", "Welcome"); !ok1 || !ok2 || !ok3 {
		t.Fatalf("snapshot: %+v", snap.Nodes)
	}
	e.call("POST", "/v1/computers/"+m.ID+"/browser/type", map[string]any{"ref": box.Ref, "text": "Kube"}, 200, &snap)
	e.call("POST", "/v1/computers/"+m.ID+"/browser/click", map[string]any{"ref": send.Ref}, 200, &snap)
	e.call("POST", "/v1/computers/"+m.ID+"/browser/snapshot", nil, 200, &snap)
	if _, ok := findNode(snap.Nodes, "StaticText", "Hello, Kube"); !ok || !strings.Contains(snap.URL, "name=Kube") {
		t.Fatalf("the result page: %s %+v", snap.URL, snap.Nodes)
	}
}

// TestReadonlyRefusesBrowserActions (issue 28): the browser tools that change pages (click, type, select,
// navigate) are refused in readonly like every dangerous tool, before any browser is started; the ones
// that only read or move the view are not dangerous.
func TestReadonlyRefusesBrowserActions(t *testing.T) {
	acts := []string{"browser_click", "browser_type", "browser_select", "browser_navigate"}
	var calls []ToolCall
	for _, name := range acts {
		calls = append(calls, call("c_"+name, name, map[string]any{"ref": "e1", "text": "x", "values": []string{"a"}, "action": "reload"}))
	}
	m := &fakeModel{script: scriptOf(toolResp(calls...))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("looker", func(sp *AgentSpec) {
		sp.Tools = []string{"browser"}
		sp.Guardrails.ApprovalMode = "readonly"
	}))
	denied := map[string]bool{}
	for _, e := range te.stream("looker", map[string]any{"input": "x"}).all() {
		if e["type"] == "tool_denied" {
			denied[e["call"].(map[string]any)["name"].(string)] = true
		}
	}
	for _, name := range acts {
		if !denied[name] {
			t.Errorf("%s was not refused in readonly (denied: %v)", name, denied)
		}
	}
	for _, name := range toolBundles["browser"] {
		if want := slices.Contains(acts, name); isDangerous(name) != want {
			t.Errorf("%s: dangerous %v, want %v", name, isDangerous(name), want)
		}
	}
}
