//go:build linux

package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browserPanelMachine: Chromium for the dashboard's page, a server, and a sandbox machine of the
// browser flavor that is destroyed when the test ends (the Browser panel's tests).
func browserPanelMachine(t *testing.T) (devtools string, te *testServer, m ComputerInfo) {
	requireBrowser(t, "sandbox")
	devtools = launchChromium(t)
	te = newTestServer(t, withHostEnv)
	m = te.create(map[string]any{"provider": "sandbox", "flavor": "browser", "idleTimeoutSec": 0, "memoryMb": 2048})
	t.Cleanup(func() { te.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil) })
	return devtools, te, m
}

// The machine page's Browser panel (issue 28) in a real Chromium, against a real server whose sandbox
// machine runs the host's Chromium: the panel opens on the status (installed, version), goes to a page the
// machine serves itself through the address bar, lists the snapshot's elements, clicks a button and types
// into the form (plain, then with submit) through the list, the next snapshot shows the result, the live
// screenshot is a PNG of the browser's size that refreshes while the panel is open and not once it is
// hidden; a run's browser_screenshot is shown as an image on the run's page (read through the files API);
// Close browser stops it (no process left).
func TestDashboardBrowserPanel(t *testing.T) {
	devtools, te, m := browserPanelMachine(t)
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port: the sandbox may share the host's network
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	serveTestPages(te, m.ID, port)
	site := fmt.Sprintf("http://localhost:%d/", port)

	p := openPage(t, devtools)
	p.viewport(1280, 800)
	p.navigate(te.url + "/computers/" + m.ID)
	panel := `document.querySelector('.browser-panel')`
	state := panel + `.querySelector('.browser-state').innerText`
	rows := `[...document.querySelectorAll('.browser-panel tbody tr')]`
	shots := `performance.getEntriesByType('resource').filter((e) => e.name.includes('/browser/screenshot')).length`
	// The panel is last on the page: wait for the file list above it to settle before clicking.
	p.waitFor("the Browser panel, closed, below the files", panel+` && document.getElementById('browser-body').hidden && document.querySelector('main').innerText.includes('www/')`)
	if got := p.eval(shots); got != 0.0 {
		t.Fatalf("a closed panel took %v screenshots", got)
	}

	// Open: the status says Chromium is there and not yet running (nothing starts it but an address).
	p.clickOn(`.browser-panel button[aria-controls="browser-body"]`)
	p.waitFor("the status", `!document.getElementById('browser-body').hidden && /Chromium/.test(`+state+`) && /not running/.test(`+state+`)`)

	// The address bar (typed without a scheme, as into a browser's): goto, then the snapshot's elements
	// listed with ref, role and name, and the screen.
	p.clickOn(`.browser-goto input`)
	p.typeText(strings.TrimPrefix(site, "http://"), true)
	p.waitFor("the page's elements", rows+`.some((tr) => /^e\d+/.test(tr.dataset.key) && tr.innerText.includes('button') && tr.innerText.includes('Change')) && `+
		rows+`.some((tr) => tr.innerText.includes('textbox') && tr.innerText.includes('Your name'))`)
	p.waitFor("the screenshot", `(() => { const i = document.querySelector('.browser-panel img.shot'); return i && !i.hidden && i.complete && i.naturalWidth === 1280 && i.naturalHeight === 800; })()`)
	if !strings.Contains(fmt.Sprint(p.eval(state)), "Shop") || p.eval(`document.querySelector('.browser-goto input').value`) != site {
		t.Fatalf("after goto: the status %v, the address %v", p.eval(state), p.eval(`document.querySelector('.browser-goto input').value`))
	}
	refOf := func(role, name string) string {
		t.Helper()
		ref, _ := p.eval(rows + `.find((tr) => tr.children[1].innerText === ` + jsString(role) + ` && tr.children[2].innerText.includes(` + jsString(name) + `))?.dataset.key || ''`).(string)
		if ref == "" {
			t.Fatalf("no %s %q in the list: %v", role, name, p.eval(`document.querySelector('.browser-panel .snapshot').innerText`))
		}
		return ref
	}
	// Live: the screen keeps refreshing while the panel is open.
	n0 := p.eval(shots).(float64)
	p.waitFor("the live screenshot refreshing", fmt.Sprintf(`%s >= %v`, shots, n0+2))

	// Click a button by its ref: the list shows the changed page.
	p.clickOn(`.browser-panel tr[data-key="` + refOf("button", "Change") + `"] button.click`)
	p.waitFor("the changed heading", rows+`.some((tr) => tr.innerText.includes('heading') && tr.innerText.includes('Changed by the button'))`)

	// Type into the text box (Type… fills the ref), then click Send: the result page.
	p.clickOn(`.browser-panel tr[data-key="` + refOf("textbox", "Your name") + `"] button.type`)
	p.waitFor("the ref in the type form", `document.activeElement === document.querySelector('.browser-type input[aria-label="Text to type"]') && document.querySelector('.browser-type input[aria-label="Ref to type into"]').value.startsWith('e')`)
	p.typeText("Ada", false)
	p.clickOn(`.browser-type button[type=submit]`)
	p.waitFor("the typed value", rows+`.some((tr) => tr.innerText.includes('Your name') && tr.innerText.includes('"Ada"'))`)
	p.waitFor("the screen with the typed value", `!`+panel+`.dataset.inflight`)
	panelPicture(p, screenshotDir(t))
	p.clickOn(`.browser-panel tr[data-key="` + refOf("button", "Send") + `"] button.click`)
	// The next snapshot shows the result (the Snapshot button asks for it, as a user would, until it is there).
	p.waitFor("the result page in a snapshot", `(() => { if (`+rows+`.some((tr) => tr.innerText.includes('Hello, Ada'))) return true;
		const b = [...document.querySelectorAll('.browser-panel button')].find((x) => x.textContent === 'Snapshot');
		if (!b.disabled && Date.now() - (window.snapAt || 0) > 1000) { window.snapAt = Date.now(); b.click(); } return false; })()`)
	p.waitFor("the address bar following the page", `document.querySelector('.browser-goto input').value.includes('result.html?name=Ada')`)

	// Type with submit (Enter) from the start page.
	p.eval(`(() => { const i = document.querySelector('.browser-goto input'); i.value = ` + jsString(site) + `; i.form.requestSubmit(); return true; })()`)
	p.waitFor("the start page again", rows+`.some((tr) => tr.innerText.includes('Your name'))`)
	p.clickOn(`.browser-panel tr[data-key="` + refOf("textbox", "Your name") + `"] button.type`)
	p.typeText("Grace", false)
	p.clickOn(`.browser-type input[type=checkbox]`)
	p.clickOn(`.browser-type button[type=submit]`)
	p.waitFor("submitted with Enter", `(() => { if (`+rows+`.some((tr) => tr.innerText.includes('Hello, Grace'))) return true;
		const b = [...document.querySelectorAll('.browser-panel button')].find((x) => x.textContent === 'Snapshot');
		if (!b.disabled && Date.now() - (window.snapAt || 0) > 1000) { window.snapAt = Date.now(); b.click(); } return false; })()`)
	p.clean("browser panel")

	// Hidden: no more screenshots, while a run (seconds of work) saves one with browser_screenshot.
	p.clickOn(`.browser-panel button[aria-controls="browser-body"]`)
	p.waitFor("the panel hidden, no screenshot on its way", `document.getElementById('browser-body').hidden && !`+panel+`.dataset.inflight`)
	// Requests as the browser sent them (DevTools' Network events), not as they finished.
	sent := func() (n int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, u := range p.urls {
			if strings.Contains(u, "/browser/screenshot") {
				n++
			}
		}
		return n
	}
	hidden := sent()
	fm := &fakeModel{script: scriptOf(toolResp(call("c1", "browser_screenshot", map[string]any{})))}
	te.s.runs.Close()
	te.s.runs = newRunService(runDeps{store: te.s.store, hub: te.s.hub, models: fm, computers: te.s.computers,
		now: time.Now, log: te.s.log, getenv: os.Getenv, home: t.TempDir(), metrics: te.s.metrics})
	te.putAgent(testSpec("shooter", func(sp *AgentSpec) { sp.Tools = []string{"computer", "browser"} }))
	if res := te.run("shooter", map[string]any{"input": "take a screenshot", "computerId": m.ID}); res["stopReason"] != "complete" {
		t.Fatalf("run: %v", res)
	}
	if got := sent(); got != hidden {
		t.Fatalf("the hidden panel kept taking screenshots: %v, then %v", hidden, got)
	}
	runs := te.call("GET", "/v1/runs?agent=shooter", nil, 200, nil).json(t)["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("runs of shooter: %v", runs)
	}
	p.navigate(te.url + "/runs/" + runs[0].(map[string]any)["runId"].(string))
	p.waitFor("the run's screenshot as an image", `(() => { const i = document.querySelector('.timeline figure.screenshot img'); return i && i.complete && i.naturalWidth === 1280 && i.naturalHeight === 800; })()`)
	p.clean("run page")

	// Close browser: stopped, no process left.
	p.navigate(te.url + "/computers/" + m.ID)
	p.waitFor("the page settled", `document.querySelector('main').innerText.includes('www/')`)
	p.clickOn(`.browser-panel button[aria-controls="browser-body"]`)
	p.waitFor("running, its elements listed", `/ running/.test(`+state+`) && `+rows+`.length`)
	p.clickOn(`.browser-panel button.danger`)
	p.waitFor("closed", `/not running/.test(`+state+`) && !`+rows+`.length`)
	eventually(t, "no chromium process after Close browser", func() bool { return len(hostBrowserPids(m.ID)) == 0 })
	p.clean("close")
}

// A machine without Chromium (docker's base image): the opened panel says what is missing and how to get
// it, and its controls are off (issue 28: status says what is missing and how to get it).
func TestDashboardBrowserPanelMissing(t *testing.T) {
	requireProvider(t, "docker")
	devtools := launchChromium(t)
	te := newTestServer(t, withHostEnv)
	m := te.create(map[string]any{"provider": "docker", "idleTimeoutSec": 0})
	defer te.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	p := openPage(t, devtools)
	p.viewport(1280, 800)
	p.navigate(te.url + "/computers/" + m.ID)
	p.waitFor("the page settled", `document.querySelector('.browser-panel') && document.querySelector('main').innerText.includes('Upload to this folder')`)
	p.clickOn(`.browser-panel button[aria-controls="browser-body"]`)
	p.waitFor("what is missing and how to get it", `(() => { const a = document.querySelector('.browser-panel [role=alert]');
		return a && !a.hidden && a.innerText.includes('no Chromium') && a.innerText.includes('flavor browser') &&
			/not installed/.test(document.querySelector('.browser-state').innerText) &&
			document.querySelector('.browser-goto input').disabled && document.querySelector('.browser-goto button[type=submit]').disabled; })()`)
	p.clean("no chromium")
}

// panelPicture saves the Browser panel as it is (README: docs/screenshots with AGENT_SCREENSHOTS=1).
func panelPicture(p *cdpPage, dir string) {
	p.t.Helper()
	box, _ := p.eval(`(() => { document.getElementById('toasts').replaceChildren(); const b = document.querySelector('.browser-panel').getBoundingClientRect();
		return [b.x + scrollX, b.y + scrollY, b.width, b.height]; })()`).([]any)
	if len(box) != 4 {
		p.t.Fatal("no box for the Browser panel")
	}
	var out struct {
		Data string `json:"data"`
	}
	json.Unmarshal(p.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1}}), &out)
	b, err := base64.StdEncoding.DecodeString(out.Data)
	if err != nil || len(b) < 1000 {
		p.t.Fatalf("the panel's picture: %v (%d bytes)", err, len(b))
	}
	if err := os.WriteFile(filepath.Join(dir, "computer-browser-1280.png"), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
}
