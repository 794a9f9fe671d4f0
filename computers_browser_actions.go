// computers_browser_actions.go — the in-machine browser's further operations (issue 28), on the same
// DevTools session and refs as computers_browser.go: waiting for text or an element, scrolling,
// choosing options, hovering, history (back, forward, reload) and tabs.
//
// Entry points: BrowserWaitFor, BrowserScroll, BrowserSelect, BrowserHover, BrowserNavigate, BrowserTabs
// (the MCP server's browser extras, and tools of the browser bundle); actOn, mouse and callOn (the
// ref-acting steps click and type share); pages, switchTo and openTab (tabs: attach uses them too).
//
// Rules: an operation holds the browser (one at a time) like the others; refs act only while in the last
// snapshot of the current tab's document (checkRef); a tab switch forgets the refs. Tabs are indexed in
// the order agentd first saw them (pages a page opened itself appear at the end); the last tab closed
// leaves a blank one, so the browser always has a current tab. wait_for runs its check in the page
// (a promise resolved by a MutationObserver or a 100 ms poll), and starts again in the next document when
// the page navigates meanwhile, until its own deadline.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// actOn runs do on the element of ref (checked against the last snapshot), then answers the page's
// snapshot after any navigation it started (act).
func (c *computerService) actOn(ctx context.Context, id, ref string, do func(b *machineBrowser, node int64) error) (*SnapshotResult, error) {
	node, err := backendID(ref)
	if err != nil {
		return nil, err
	}
	return c.act(ctx, id, func(b *machineBrowser) error {
		if err := b.checkRef(ctx, ref, node); err != nil {
			return err
		}
		return do(b, node)
	})
}

// mouse sends the mouse events types (mouseMoved, mousePressed, mouseReleased) at the middle of node,
// scrolled into view; presses and releases are of the left button.
func (b *machineBrowser) mouse(ctx context.Context, ref string, node int64, types ...string) error {
	x, y, err := b.center(ctx, ref, node)
	if err != nil {
		return err
	}
	for _, typ := range types {
		ev := map[string]any{"type": typ, "x": x, "y": y}
		if typ != "mouseMoved" {
			ev["button"], ev["clickCount"] = "left", 1
		}
		if err := b.cdp.call(ctx, b.session, "Input.dispatchMouseEvent", ev, nil); err != nil {
			return b.fail(err)
		}
	}
	return nil
}

// callOn calls the JavaScript function fn with node as `this` and args, decoding its JSON value into out
// (nil: ignored).
func (b *machineBrowser) callOn(ctx context.Context, ref string, node int64, fn string, args []any, out any) error {
	var obj struct {
		Object struct {
			ObjectID string `json:"objectId"`
		} `json:"object"`
	}
	if err := b.cdp.call(ctx, b.session, "DOM.resolveNode", map[string]any{"backendNodeId": node}, &obj); err != nil {
		return staleRef(ref, err)
	}
	params := map[string]any{"objectId": obj.Object.ObjectID, "functionDeclaration": fn, "returnByValue": true}
	if len(args) > 0 {
		vals := make([]map[string]any, len(args))
		for i, a := range args {
			vals[i] = map[string]any{"value": a}
		}
		params["arguments"] = vals
	}
	if err := b.script(ctx, "Runtime.callFunctionOn", params, out); err != nil {
		return b.fail(err)
	}
	return nil
}

// BrowserHover moves the mouse over ref's element (menus and tooltips that open on hover open).
func (c *computerService) BrowserHover(ctx context.Context, id, ref string) (*SnapshotResult, error) {
	return c.actOn(ctx, id, ref, func(b *machineBrowser, node int64) error {
		return b.mouse(ctx, ref, node, "mouseMoved")
	})
}

// selectFn chooses the options of a <select> whose value, label or text is one of vals, and fires
// input and change as a person's choice does.
const selectFn = `function(vals) {
  if (!(this instanceof HTMLSelectElement)) return {error: "the element is not a select (it is a " + this.tagName.toLowerCase() + ")"};
  const opts = Array.from(this.options);
  const hit = opts.filter(o => vals.includes(o.value) || vals.includes(o.label) || vals.includes(o.text.trim()));
  if (hit.length === 0) return {error: "no option matches " + JSON.stringify(vals) + "; the options are " + opts.map(o => JSON.stringify(o.label)).join(", ")};
  if (!this.multiple && vals.length > 1) return {error: "this select takes one value, received " + vals.length};
  if (this.disabled) return {error: "the select is disabled"};
  this.focus();
  for (const o of opts) o.selected = hit.includes(o);
  this.dispatchEvent(new Event("input", {bubbles: true}));
  this.dispatchEvent(new Event("change", {bubbles: true}));
  return {selected: hit.map(o => o.value)};
}`

// BrowserSelect chooses values (each an option's value, label or text) in ref's <select>.
func (c *computerService) BrowserSelect(ctx context.Context, id, ref string, values []string) (*SnapshotResult, error) {
	if len(values) == 0 {
		return nil, errorf(codeSpecInvalid, "values: Required (one or more option values or labels)")
	}
	return c.actOn(ctx, id, ref, func(b *machineBrowser, node int64) error {
		var r struct {
			Error string `json:"error"`
		}
		if err := b.callOn(ctx, ref, node, selectFn, []any{values}, &r); err != nil {
			return err
		}
		if r.Error != "" {
			return errorf(codeToolError, "ref %s: %s", ref, r.Error)
		}
		return nil
	})
}

// ScrollResult is where the page is scrolled to after a scroll, and its size.
type ScrollResult struct {
	URL    string `json:"url"`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Width  int    `json:"width"`  // the document's scrollable size
	Height int    `json:"height"` //
}

// BrowserScroll brings ref's element into view, or (ref "") scrolls the page by dx, dy pixels.
func (c *computerService) BrowserScroll(ctx context.Context, id, ref string, dx, dy int) (*ScrollResult, error) {
	var node int64
	if ref != "" {
		var err error
		if node, err = backendID(ref); err != nil {
			return nil, err
		}
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*ScrollResult, error) {
		if ref != "" {
			if err := b.checkRef(ctx, ref, node); err != nil {
				return nil, err
			}
			if err := b.cdp.call(ctx, b.session, "DOM.scrollIntoViewIfNeeded", map[string]any{"backendNodeId": node}, nil); err != nil {
				return nil, staleRef(ref, err)
			}
		}
		out := &ScrollResult{}
		err := b.eval(ctx, fmt.Sprintf(`(() => { scrollBy(%d, %d); const e = document.scrollingElement || document.documentElement;
  return {url: location.href, x: Math.round(scrollX), y: Math.round(scrollY), width: e.scrollWidth, height: e.scrollHeight}; })()`, dx, dy), out)
		if err != nil {
			return nil, b.fail(err)
		}
		return out, nil
	})
}

// waitForJS is the page-side check of wait_for: a promise of "ok" once the condition holds, "timeout" at
// the deadline, "error: ..." for a selector the page refuses. Text is the page's visible text
// (innerText); an element counts while it has a box.
const waitForJS = `new Promise((resolve) => {
  const text = %s, sel = %s, gone = %t;
  const present = () => {
    if (sel !== "") {
      const el = document.querySelector(sel);
      return !!el && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
    }
    return !!document.body && document.body.innerText.includes(text);
  };
  let obs, poll, timer;
  const check = () => {
    let ok;
    try { ok = present() !== gone; } catch (e) { finish(); resolve("error: " + e.message); return; }
    if (ok) { finish(); resolve("ok"); }
  };
  const finish = () => { if (obs) obs.disconnect(); clearInterval(poll); clearTimeout(timer); };
  timer = setTimeout(() => { finish(); resolve("timeout"); }, %d);
  obs = new MutationObserver(check);
  obs.observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
  poll = setInterval(check, 100);
  check();
})`

// BrowserWaitFor waits up to timeoutSec (1..300, 0 is 30) for text to appear on the page, or an element
// matching the CSS selector, or with gone for it to go; then answers the page's snapshot.
func (c *computerService) BrowserWaitFor(ctx context.Context, id, text, selector string, gone bool, timeoutSec int) (*SnapshotResult, error) {
	if (text == "") == (selector == "") {
		return nil, errorf(codeSpecInvalid, "wait_for: send one of text and selector").withHint(`{"text": "Saved"} or {"selector": "#result", "gone": true}`)
	}
	if err := checkPageTimeout(&timeoutSec); err != nil {
		return nil, err
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*SnapshotResult, error) {
		deadline := time.Now().Add(time.Duration(timeoutSec) * time.Second)
		jt, _ := json.Marshal(text)
		js, _ := json.Marshal(selector)
		for {
			left := time.Until(deadline)
			var got string
			err := b.eval(ctx, fmt.Sprintf(waitForJS, jt, js, gone, max(left.Milliseconds(), 1)), &got)
			switch {
			case err == nil && got == "ok":
				return b.snapshot(ctx, browserSnapshotDflt)
			case err == nil && strings.HasPrefix(got, "error: "):
				return nil, errorf(codeSpecInvalid, "selector: %s", strings.TrimPrefix(got, "error: "))
			case err == nil || time.Until(deadline) <= 0:
				what := fmt.Sprintf("text %q", text)
				if selector != "" {
					what = fmt.Sprintf("an element matching %q", selector)
				}
				verb := "appear"
				if gone {
					verb = "go"
				}
				return nil, errorf(codeToolError, "waited %d s for %s to %s; it did not", timeoutSec, what, verb).
					withHint("take a snapshot to see the page, or wait longer (timeoutSec ≤ 300)")
			}
			var ce *cdpCallError
			if !errors.As(err, &ce) || !(strings.Contains(ce.e.Message, "context") || strings.Contains(ce.e.Message, "collected")) {
				return nil, b.fail(err) // not the document changing under the wait: a dead browser
			}
			// The page navigated during the wait: check again in the next document, shortly.
			if err := b.pause(ctx, 50*time.Millisecond); err != nil {
				return nil, err
			}
		}
	})
}

// BrowserNavigate goes back or forward in the current tab's history, or reloads it, and waits up to
// timeoutSec (0 is 30) for the page.
func (c *computerService) BrowserNavigate(ctx context.Context, id, action string, timeoutSec int) (*GotoResult, error) {
	if !slices.Contains([]string{"back", "forward", "reload"}, action) {
		return nil, errorf(codeSpecInvalid, "action: expected back, forward or reload, received %q", action)
	}
	if err := checkPageTimeout(&timeoutSec); err != nil {
		return nil, err
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*GotoResult, error) {
		events, stop := b.cdp.subscribe(b.session, pageLoadEvents...)
		defer stop()
		if action == "reload" {
			if err := b.cdp.call(ctx, b.session, "Page.reload", map[string]any{}, nil); err != nil {
				return nil, b.fail(err)
			}
		} else {
			var h struct {
				CurrentIndex int `json:"currentIndex"`
				Entries      []struct {
					ID int `json:"id"`
				} `json:"entries"`
			}
			if err := b.cdp.call(ctx, b.session, "Page.getNavigationHistory", nil, &h); err != nil {
				return nil, b.fail(err)
			}
			i := h.CurrentIndex + 1
			if action == "back" {
				i = h.CurrentIndex - 1
			}
			if i < 0 || i >= len(h.Entries) {
				return nil, errorf(codeToolError, "there is no page to go %s to in this tab's history", action).withHint("open one with browser_goto")
			}
			if err := b.cdp.call(ctx, b.session, "Page.navigateToHistoryEntry", map[string]any{"entryId": h.Entries[i].ID}, nil); err != nil {
				return nil, b.fail(err)
			}
		}
		out := &GotoResult{}
		var err error
		if out.Loaded, err = b.awaitLoad(ctx, events, time.Duration(timeoutSec)*time.Second); err != nil {
			return nil, err
		}
		if out.URL, out.Title, out.Status, err = b.where(ctx); err != nil {
			return nil, b.fail(err)
		}
		return out, nil
	})
}

// ---- tabs ----

// BrowserTab is one tab of the browser.
type BrowserTab struct {
	Index   int    `json:"index"`
	URL     string `json:"url"`
	Title   string `json:"title"`
	Current bool   `json:"current"`
}

// TabsResult is the browser's tabs after a tabs action (and the load of a new tab's URL).
type TabsResult struct {
	Tabs []BrowserTab `json:"tabs"`
	Goto *GotoResult  `json:"goto,omitempty"`
}

type pageTarget struct {
	TargetID string `json:"targetId"`
	Type     string `json:"type"`
	URL      string `json:"url"`
	Title    string `json:"title"`
}

// pages are the browser's tabs in their index order; b.tabs follows them (gone ones dropped, new ones
// appended in the browser's order).
func (b *machineBrowser) pages(ctx context.Context) ([]pageTarget, error) {
	var targets struct {
		TargetInfos []pageTarget `json:"targetInfos"`
	}
	if err := b.cdp.call(ctx, "", "Target.getTargets", nil, &targets); err != nil {
		return nil, err
	}
	byID := map[string]pageTarget{}
	for _, t := range targets.TargetInfos {
		if t.Type == "page" {
			byID[t.TargetID] = t
			if !slices.Contains(b.tabs, t.TargetID) {
				b.tabs = append(b.tabs, t.TargetID)
			}
		}
	}
	b.tabs = slices.DeleteFunc(b.tabs, func(id string) bool { _, ok := byID[id]; return !ok })
	out := make([]pageTarget, len(b.tabs))
	for i, id := range b.tabs {
		out[i] = byID[id]
	}
	for id := range b.sessions {
		if _, ok := byID[id]; !ok {
			delete(b.sessions, id)
		}
	}
	return out, nil
}

// switchTo makes target the current tab, attaching a session to it the first time (its page events on,
// the viewport set). The refs of the previous tab are forgotten.
func (b *machineBrowser) switchTo(ctx context.Context, target string) error {
	session, ok := b.sessions[target]
	if !ok {
		var att struct {
			SessionID string `json:"sessionId"`
		}
		if err := b.cdp.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &att); err != nil {
			return err
		}
		session = att.SessionID
		if err := b.cdp.call(ctx, session, "Page.enable", nil, nil); err != nil {
			return err
		}
		if err := b.cdp.call(ctx, session, "Emulation.setDeviceMetricsOverride",
			map[string]any{"width": browserWidth, "height": browserHeight, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
			return err
		}
		b.sessions[target] = session
	}
	b.cdp.call(ctx, "", "Target.activateTarget", map[string]any{"targetId": target}, nil) // focus only: headless needs none
	b.target, b.session = target, session
	b.refs, b.refsLoader = nil, ""
	if !slices.Contains(b.tabs, target) {
		b.tabs = append(b.tabs, target)
	}
	return nil
}

// untilClosed waits (up to 10 s) until the browser no longer lists the closing tab: closing is
// asynchronous.
func (b *machineBrowser) untilClosed(ctx context.Context, closing string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.pages(ctx); err != nil {
			return b.fail(err)
		}
		if !slices.Contains(b.tabs, closing) {
			return nil
		}
		if time.Now().After(deadline) {
			return errorf(codeToolError, "the tab did not close within 10 s")
		}
		if err := b.pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// pause waits d between two checks of a poll, unless the browser exits or ctx ends first.
func (b *machineBrowser) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-b.cdp.done():
		return b.fail(errors.New("the browser exited"))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openTab opens a blank tab and makes it the current one.
func (b *machineBrowser) openTab(ctx context.Context) error {
	var created struct {
		TargetID string `json:"targetId"`
	}
	if err := b.cdp.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created); err != nil {
		return err
	}
	return b.switchTo(ctx, created.TargetID)
}

// BrowserTabs lists the tabs, or (action new) opens one (at rawURL, when given) and makes it current,
// (select) makes tab index current, or (close) closes tab index (-1: the current one).
func (c *computerService) BrowserTabs(ctx context.Context, id, action string, index int, rawURL string, timeoutSec int) (*TabsResult, error) {
	switch action {
	case "list", "new", "select", "close":
	default:
		return nil, errorf(codeSpecInvalid, "action: expected list, new, select or close, received %q", action)
	}
	if action == "select" && index < 0 {
		return nil, errorf(codeSpecInvalid, "index: Required to select a tab (browser_tabs list shows them)")
	}
	if rawURL != "" {
		if action != "new" {
			return nil, errorf(codeSpecInvalid, "url: only a new tab takes a url")
		}
		if err := checkBrowserURL(rawURL); err != nil {
			return nil, err
		}
		if err := checkPageTimeout(&timeoutSec); err != nil {
			return nil, err
		}
	}
	return withBrowser(c, ctx, id, func(b *machineBrowser) (*TabsResult, error) {
		pages, err := b.pages(ctx)
		if err != nil {
			return nil, b.fail(err)
		}
		if !slices.Contains(b.tabs, b.target) && len(pages) > 0 { // the page closed itself
			if err := b.switchTo(ctx, pages[0].TargetID); err != nil {
				return nil, b.fail(err)
			}
		}
		badIndex := func() error {
			return errorf(codeToolError, "there is no tab %d: the tabs are 0..%d", index, len(pages)-1).withHint("browser_tabs list shows them")
		}
		out := &TabsResult{}
		switch action {
		case "new":
			if err := b.openTab(ctx); err != nil {
				return nil, b.fail(err)
			}
			if rawURL != "" {
				if out.Goto, err = b.gotoURL(ctx, rawURL, timeoutSec); err != nil {
					return nil, err
				}
			}
		case "select":
			if index >= len(pages) {
				return nil, badIndex()
			}
			if err := b.switchTo(ctx, pages[index].TargetID); err != nil {
				return nil, b.fail(err)
			}
		case "close":
			cur := slices.Index(b.tabs, b.target)
			if index < 0 {
				index = cur
			}
			if index >= len(pages) || index < 0 {
				return nil, badIndex()
			}
			closing := pages[index].TargetID
			if err := b.cdp.call(ctx, "", "Target.closeTarget", map[string]any{"targetId": closing}, nil); err != nil {
				return nil, b.fail(err)
			}
			if err := b.untilClosed(ctx, closing); err != nil {
				return nil, err
			}
			if closing == b.target {
				if len(b.tabs) == 0 {
					err = b.openTab(ctx)
				} else {
					err = b.switchTo(ctx, b.tabs[min(index, len(b.tabs)-1)])
				}
				if err != nil {
					return nil, b.fail(err)
				}
			}
		}
		if pages, err = b.pages(ctx); err != nil {
			return nil, b.fail(err)
		}
		for i, p := range pages {
			out.Tabs = append(out.Tabs, BrowserTab{Index: i, URL: p.URL, Title: p.Title, Current: p.TargetID == b.target})
		}
		return out, nil
	})
}
