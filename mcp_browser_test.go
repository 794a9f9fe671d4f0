package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"regexp"
	"strings"
	"testing"
)

// mcpBrowserPages are the pages TestMCPBrowserTools serves in the machine: a select whose choice
// changes the page, a field, an element that changes on hover, text that appears later and text that
// goes later, a long page to scroll, a link to another page.
var mcpBrowserPages = map[string]string{
	"index.html": `<!doctype html><html><head><title>Shop</title></head><body>
<h1 id="h">Welcome</h1>
<label for="colour">Colour</label>
<select id="colour" onchange="document.getElementById('picked').textContent = 'Picked ' + this.value">
<option value="red">Red</option><option value="blue">Blue</option></select>
<p id="picked">Picked nothing</p>
<label for="name">Your name</label> <input id="name" type="text">
<button id="hov" onmouseover="this.textContent = 'Hovered over'">Hover me</button>
<button id="later" onclick="setTimeout(() => { document.getElementById('late').textContent = 'Arrived late'; document.getElementById('soon').remove(); }, 300)">Later</button>
<p id="late"></p><p id="soon">Going soon</p>
<p><a href="/about.html">About us</a></p>
<div style="height: 5000px">tall</div><p id="bottom">The bottom</p>
</body></html>`,
	"about.html": `<!doctype html><html><head><title>About</title></head><body><p>About this shop</p></body></html>`,
}

// refOf finds the ref of role "name" in a browser tool's snapshot lines.
func refOf(t *testing.T, snapshot, role, name string) string {
	t.Helper()
	for _, line := range strings.Split(snapshot, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[1] == role && strings.Contains(line, `"`+name) {
			return f[0]
		}
	}
	t.Fatalf("no %s %q in the snapshot:\n%s", role, name, snapshot)
	return ""
}

// TestMCPBrowserTools (issue 28): every browser tool of the MCP server, through agentd's /mcp, on a real
// Chromium in the session's machine (the sandbox runs the host's chromium): status, goto, snapshot,
// type, select, hover, click, wait_for (appear, gone, a timeout, a bad selector), scroll, screenshot as
// inline MCP image content of the viewport's size, navigate (back, forward, reload), tabs (new, list,
// select, close), and tools/list's annotations (the dangerous ones destructive).
func TestMCPBrowserTools(t *testing.T) {
	requireBrowser(t, "sandbox")
	ts := newTestServer(t, withHostEnv, withBrowserImage, func(c *testSetup) { c.ComputerProvider = "sandbox" })
	c, _ := mcpConnect(t, ts, mcpLatestVersion)
	must := func(name string, args map[string]any, want ...string) string {
		t.Helper()
		text, isErr, _ := c.call(name, args)
		if isErr {
			t.Fatalf("%s %v: error %q", name, args, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Fatalf("%s %v: %q lacks %q", name, args, text, w)
			}
		}
		return text
	}
	fails := func(name string, args map[string]any, want string) {
		t.Helper()
		text, isErr, _ := c.call(name, args)
		if !isErr || !strings.Contains(text, want) {
			t.Fatalf("%s %v: want an error with %q, got %v %q", name, args, want, isErr, text)
		}
	}

	// The first call is a browser tool: the session's machine is made of flavor browser.
	must("browser_status", nil, "provider sandbox", "Browser: Chromium", "Running: false")
	for name, body := range mcpBrowserPages {
		must("write_file", map[string]any{"path": "/work/www/" + name, "content": body})
	}
	must("shell", map[string]any{"command": `cd /work/www && (setsid nohup python3 -m http.server 8000 >/dev/null 2>&1 &) && python3 -c '
import time, urllib.request
for i in range(300):
    try:
        urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2); print("up"); break
    except Exception:
        time.sleep(0.1)
'`}, "up")
	base := "http://localhost:8000/"
	must("browser_goto", map[string]any{"url": base}, "Title: Shop", "Status: 200", "Loaded: true")
	snap := must("browser_snapshot", nil, `heading "Welcome"`)

	// type, select (its onchange runs), hover (its handler runs), click + wait_for.
	after := must("browser_type", map[string]any{"ref": refOf(t, snap, "textbox", "Your name"), "text": "Ada"}, `= "Ada"`)
	after = must("browser_select", map[string]any{"ref": refOf(t, after, "combobox", "Colour"), "values": []string{"Blue"}}, `"Picked blue"`)
	fails("browser_select", map[string]any{"ref": refOf(t, after, "combobox", "Colour"), "values": []string{"green"}}, `no option matches`)
	fails("browser_select", map[string]any{"ref": refOf(t, after, "textbox", "Your name"), "values": []string{"x"}}, "not a select")
	after = must("browser_hover", map[string]any{"ref": refOf(t, after, "button", "Hover me")}, `button "Hovered over"`)
	must("browser_click", map[string]any{"ref": refOf(t, after, "button", "Later")})
	must("browser_wait_for", map[string]any{"text": "Arrived late", "timeoutSec": 30}, `"Arrived late"`)
	if got := must("browser_wait_for", map[string]any{"selector": "#soon", "gone": true}); strings.Contains(got, "Going soon") {
		t.Fatalf("wait_for gone: the text is still there:\n%s", got)
	}
	fails("browser_wait_for", map[string]any{"text": "Never on this page", "timeoutSec": 1}, "did not")
	fails("browser_wait_for", map[string]any{"selector": "##bad("}, "selector")
	fails("browser_wait_for", map[string]any{}, "one of text and selector")

	// scroll: by pixels, then an element into view.
	must("browser_scroll", map[string]any{"direction": "down", "pixels": 300}, "y=300")
	snap = must("browser_snapshot", nil)
	if got := must("browser_scroll", map[string]any{"ref": refOf(t, snap, "StaticText", "The bottom")}); !regexp.MustCompile(`y=[1-9][0-9]{3,}`).MatchString(got) {
		t.Fatalf("scrolling the bottom into view: %q", got)
	}

	// screenshot: inline MCP image content, a PNG of the viewport.
	_, isErr, res := c.call("browser_screenshot", nil)
	content := res["content"].([]any)
	if isErr || len(content) != 2 {
		t.Fatalf("screenshot: %v", res)
	}
	img := content[1].(map[string]any)
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(img["data"]))
	if err != nil || img["type"] != "image" || img["mimeType"] != "image/png" {
		t.Fatalf("screenshot content: type %v mimeType %v: %v", img["type"], img["mimeType"], err)
	}
	pic, err := png.Decode(bytes.NewReader(raw))
	if err != nil || pic.Bounds().Dx() != browserWidth || pic.Bounds().Dy() != browserHeight {
		t.Fatalf("screenshot: %v %v", err, pic)
	}

	// navigate: follow the link, back, forward, reload; nothing before the first page.
	snap = must("browser_snapshot", nil)
	must("browser_click", map[string]any{"ref": refOf(t, snap, "link", "About us")}, "about.html")
	must("browser_navigate", map[string]any{"action": "back"}, "Title: Shop", "Loaded: true")
	must("browser_navigate", map[string]any{"action": "forward"}, "Title: About", "Loaded: true")
	must("browser_navigate", map[string]any{"action": "reload"}, "Title: About", "Loaded: true")
	fails("browser_navigate", map[string]any{"action": "sideways"}, "back, forward or reload")

	// tabs: a new one at a URL becomes current; select, close; the others act on the current tab.
	must("browser_tabs", map[string]any{"action": "new", "url": base}, `* 1 "Shop"`, `  0 "About"`, "Title: Shop")
	must("browser_tabs", map[string]any{"action": "select", "index": 0}, `* 0 "About"`)
	must("browser_snapshot", nil, `"About this shop"`)
	must("browser_tabs", map[string]any{"action": "close", "index": 0}, `* 0 "Shop"`)
	if got := must("browser_tabs", map[string]any{"action": "list"}); strings.Count(got, "\n") != 2 {
		t.Fatalf("one tab left: %q", got)
	}
	fails("browser_tabs", map[string]any{"action": "select", "index": 5}, "no tab 5")
	must("browser_tabs", map[string]any{"action": "close"}, `* 0 "about:blank" about:blank`) // the last tab closed leaves a blank one
	must("browser_status", nil, "Running: true", "about:blank")

	// tools/list: the browser tools with their annotations; the ones that change pages are destructive.
	tools := c.rpc("tools/list", map[string]any{})["result"].(map[string]any)["tools"].([]any)
	seen := map[string]bool{}
	for _, x := range tools {
		tl := x.(map[string]any)
		name := tl["name"].(string)
		if !strings.HasPrefix(name, "browser") {
			continue
		}
		seen[name] = true
		destructive := tl["annotations"].(map[string]any)["destructiveHint"] == true
		if destructive != isDangerous(name) {
			t.Fatalf("%s: destructiveHint %v", name, destructive)
		}
	}
	for _, name := range []string{"browser_goto", "browser_snapshot", "browser_click", "browser_type", "browser_screenshot",
		"browser_wait_for", "browser_scroll", "browser_select", "browser_hover", "browser_navigate", "browser_tabs", "browser_status"} {
		if !seen[name] {
			t.Fatalf("tools/list lacks %s", name)
		}
	}
	for _, name := range []string{"browser_click", "browser_type", "browser_select", "browser_navigate"} {
		if !isDangerous(name) {
			t.Fatalf("%s is not dangerous", name)
		}
	}
	list, _ := ts.s.store.ListComputers(context.Background())
	if len(list) != 1 || list[0].Spec.Flavor != "browser" {
		t.Fatalf("the session's machine: %+v", list)
	}
}
