// computers_browser_tools.go — the model's tools for reading and driving web pages in its computer
// (issue 28): the `browser` bundle (browse, browser_goto, browser_snapshot, browser_click, browser_type,
// browser_screenshot, browser_wait_for, browser_scroll, browser_select, browser_hover, browser_navigate,
// browser_tabs, browser_status). The MCP server offers the same tools (mcp.go), browser_screenshot as an
// inline image.
//
// Entry points: browserTools (merged into toolCatalog), browserTool (a tool's arguments decoded, then run
// on the run's computer and its browser service), snapshotText (the lines a model reads:
// `e42 button "Save"`), gotoText.
//
// Rules: every tool works on the run's own computer through the computer service (computers_browse.go,
// computers_browser.go, computers_browser_actions.go), so the machine's network policy and the command
// policy apply as for the API; browser_click, browser_type, browser_select (they change pages, may submit
// forms) and browser_navigate (a reload or back may send a form again) are dangerous (approvals:
// runs_guard.go); the others only read or move the view, and browser_screenshot writes its PNG in /work
// through the file jail.
package main

import (
	"context"
	"fmt"
	"strings"
)

// runBrowsers is what the browser tools need from the computer service (computerService satisfies it).
type runBrowsers interface {
	Browse(ctx context.Context, id string, req BrowseRequest) (*BrowseResult, error)
	BrowserStatus(ctx context.Context, id string) (*BrowserStatus, error)
	BrowserGoto(ctx context.Context, id, rawURL string, timeoutSec int) (*GotoResult, error)
	BrowserSnapshot(ctx context.Context, id string, limit int) (*SnapshotResult, error)
	BrowserClick(ctx context.Context, id, ref string) (*SnapshotResult, error)
	BrowserType(ctx context.Context, id, ref, text string, submit bool) (*SnapshotResult, error)
	BrowserScreenshot(ctx context.Context, id string, fullPage bool) ([]byte, error)
	BrowserWaitFor(ctx context.Context, id, text, selector string, gone bool, timeoutSec int) (*SnapshotResult, error)
	BrowserScroll(ctx context.Context, id, ref string, dx, dy int) (*ScrollResult, error)
	BrowserSelect(ctx context.Context, id, ref string, values []string) (*SnapshotResult, error)
	BrowserHover(ctx context.Context, id, ref string) (*SnapshotResult, error)
	BrowserNavigate(ctx context.Context, id, action string, timeoutSec int) (*GotoResult, error)
	BrowserTabs(ctx context.Context, id, action string, index int, rawURL string, timeoutSec int) (*TabsResult, error)
}

// browserOf is the run's computer and its browser service.
func (e *toolEnv) browserOf(ctx context.Context) (runBrowsers, string, error) {
	br, ok := e.ar.rs.computers.(runBrowsers)
	if !ok {
		return nil, "", errorf(codeToolError, "this server's computers have no browser")
	}
	id, err := e.computer(ctx)
	return br, id, err
}

// browserTool is a browser tool's run: its arguments decoded into a fresh A (whose defaults init sets),
// then do on the run's computer and its browser service.
func browserTool[A any](init func(*A), do func(ctx context.Context, env *toolEnv, br runBrowsers, id string, a *A) (string, error)) func(context.Context, *toolEnv, map[string]any) (string, error) {
	return func(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
		var a A
		if init != nil {
			init(&a)
		}
		if err := toolArgs(args, &a); err != nil {
			return "", err
		}
		br, id, err := env.browserOf(ctx)
		if err != nil {
			return "", err
		}
		return do(ctx, env, br, id, &a)
	}
}

// snapshotTool is a browser tool whose answer is the page's snapshot.
func snapshotTool[A any](init func(*A), do func(ctx context.Context, br runBrowsers, id string, a *A) (*SnapshotResult, error)) func(context.Context, *toolEnv, map[string]any) (string, error) {
	return browserTool(init, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *A) (string, error) {
		s, err := do(ctx, br, id, a)
		if err != nil {
			return "", err
		}
		return snapshotText(s), nil
	})
}

type refArg struct {
	Ref string `arg:"ref,required"`
}

type urlArgs struct {
	URL     string `arg:"url,required"`
	Timeout int    `arg:"timeoutSec"`
}

func browserTools() map[string]toolImpl {
	ref := prop("string", `a ref of the last browser_snapshot, such as "e42"`)
	timeout := func(maxSec int) map[string]any {
		return map[string]any{"type": "integer", "minimum": 1, "maximum": maxSec, "description": "seconds to wait at most"}
	}
	urlParams := func(maxSec int) map[string]any {
		return obj([]string{"url"}, map[string]any{"url": prop("string", "http or https URL"), "timeoutSec": timeout(maxSec)})
	}
	return map[string]toolImpl{
		"browse": {needsComputer: true, run: toolBrowse, def: ToolDef{Name: "browse",
			Description: "Fetch a web page from inside the computer (localhost is the computer's own: use it to look at servers you started there) and return its title, text and links. Scripts are not run; use browser_goto for pages that need them.",
			Parameters:  urlParams(120)}},
		"browser_goto": {needsComputer: true, run: toolBrowserGoto, def: ToolDef{Name: "browser_goto",
			Description: "Open a URL in the computer's real browser (Chromium; localhost is the computer's own) and wait for it to load. Then read it with browser_snapshot.",
			Parameters:  urlParams(300)}},
		"browser_snapshot": {needsComputer: true, run: toolBrowserSnapshot, def: ToolDef{Name: "browser_snapshot",
			Description: `The page open in the browser as its accessibility tree, one element a line: ref role "name" [= value]. Use the refs with browser_click and browser_type.`,
			Parameters:  obj(nil, map[string]any{"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": browserSnapshotMax}})}},
		"browser_click": {needsComputer: true, run: toolBrowserClick, def: ToolDef{Name: "browser_click",
			Description: "Click an element of the page by its ref; returns the page's snapshot afterwards.",
			Parameters:  obj([]string{"ref"}, map[string]any{"ref": ref})}},
		"browser_type": {needsComputer: true, run: toolBrowserType, def: ToolDef{Name: "browser_type",
			Description: "Type text into a field of the page by its ref (it replaces the field's value), optionally pressing Enter; returns the page's snapshot afterwards.",
			Parameters: obj([]string{"ref", "text"}, map[string]any{"ref": ref, "text": prop("string", "the text to type"),
				"submit": prop("boolean", "press Enter afterwards")})}},
		"browser_screenshot": {needsComputer: true, run: toolBrowserScreenshot, def: ToolDef{Name: "browser_screenshot",
			Description: "Save a PNG screenshot of the page (the viewport, or the whole page) in /work and return its path.",
			Parameters:  obj(nil, map[string]any{"fullPage": prop("boolean", "the whole page, not only the viewport")})}},
		"browser_wait_for": {needsComputer: true, run: toolBrowserWaitFor, def: ToolDef{Name: "browser_wait_for",
			Description: "Wait until text appears on the page (or an element matching a CSS selector does), or with gone until it disappears; returns the page's snapshot then. Use it after an action whose result comes later.",
			Parameters: obj(nil, map[string]any{"text": prop("string", "visible text to wait for"),
				"selector": prop("string", "a CSS selector to wait for, instead of text"),
				"gone":     prop("boolean", "wait for it to disappear instead"), "timeoutSec": timeout(300)})}},
		"browser_scroll": {needsComputer: true, run: toolBrowserScroll, def: ToolDef{Name: "browser_scroll",
			Description: "Scroll the page: bring the element of a ref into view, or scroll by pixels in a direction (default: down by most of a screen). Returns where the page is scrolled to.",
			Parameters: obj(nil, map[string]any{"ref": ref,
				"direction": map[string]any{"type": "string", "enum": []string{"down", "up", "left", "right"}},
				"pixels":    map[string]any{"type": "integer", "minimum": 1, "maximum": 100000}})}},
		"browser_select": {needsComputer: true, run: toolBrowserSelect, def: ToolDef{Name: "browser_select",
			Description: "Choose an option (or, in a multiple select, options) of a select element by its ref, by the options' values or labels; returns the page's snapshot afterwards.",
			Parameters: obj([]string{"ref", "values"}, map[string]any{"ref": ref,
				"values": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "description": "the options' values or labels"}})}},
		"browser_hover": {needsComputer: true, run: toolBrowserHover, def: ToolDef{Name: "browser_hover",
			Description: "Move the mouse over an element of the page by its ref (menus and tooltips that open on hover open); returns the page's snapshot afterwards.",
			Parameters:  obj([]string{"ref"}, map[string]any{"ref": ref})}},
		"browser_navigate": {needsComputer: true, run: toolBrowserNavigate, def: ToolDef{Name: "browser_navigate",
			Description: "Go back or forward in the tab's history, or reload the page, and wait for it to load.",
			Parameters: obj([]string{"action"}, map[string]any{"action": map[string]any{"type": "string", "enum": []string{"back", "forward", "reload"}},
				"timeoutSec": timeout(300)})}},
		"browser_tabs": {needsComputer: true, run: toolBrowserTabs, def: ToolDef{Name: "browser_tabs",
			Description: "List the browser's tabs, open a new one (optionally at a URL), select one or close one (by index; close without index closes the current tab). The other browser tools act on the current tab.",
			Parameters: obj([]string{"action"}, map[string]any{"action": map[string]any{"type": "string", "enum": []string{"list", "new", "select", "close"}},
				"index": map[string]any{"type": "integer", "minimum": 0, "description": "the tab's index, for select and close"},
				"url":   prop("string", "for new: the URL to open in it")})}},
		"browser_status": {needsComputer: true, run: toolBrowserStatus, def: ToolDef{Name: "browser_status",
			Description: "Say whether the computer has a browser (Chromium, its version), whether it is running, and the page it shows.",
			Parameters:  obj(nil, map[string]any{})}},
	}
}

func toolBrowse(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(nil, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *urlArgs) (string, error) {
		r, err := br.Browse(ctx, id, BrowseRequest{URL: a.URL, TimeoutSec: a.Timeout})
		if err != nil {
			return "", err
		}
		out := browseText(r)
		if r.Status >= 400 {
			return out, errorf(codeToolError, "the server answered %d", r.Status)
		}
		return out, nil
	})(ctx, env, args)
}

// gotoText is a page load's answer as a model reads it (an error when the page did not load).
func gotoText(g *GotoResult) (string, error) {
	out := fmt.Sprintf("URL: %s\nTitle: %s\nStatus: %d\nLoaded: %v", g.URL, g.Title, g.Status, g.Loaded)
	if g.Error != "" {
		return out + "\nError: " + g.Error, errorf(codeToolError, "the page did not load: %s", g.Error)
	}
	return out, nil
}

func toolBrowserGoto(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(nil, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *urlArgs) (string, error) {
		g, err := br.BrowserGoto(ctx, id, a.URL, a.Timeout)
		if err != nil {
			return "", err
		}
		return gotoText(g)
	})(ctx, env, args)
}

// snapshotText is a snapshot as lines a model reads: `e42 button "Save"`, with ` = "value"` for fields.
func snapshotText(s *SnapshotResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\n", s.URL)
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "%s %s %q", n.Ref, n.Role, n.Name)
		if n.Value != "" {
			fmt.Fprintf(&b, " = %q", n.Value)
		}
		b.WriteByte('\n')
	}
	if s.Truncated {
		b.WriteString("(more elements not shown: raise limit)\n")
	}
	return b.String()
}

func toolBrowserSnapshot(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *struct {
		Limit int `arg:"limit"`
	}) (*SnapshotResult, error) {
		return br.BrowserSnapshot(ctx, id, a.Limit)
	})(ctx, env, args)
}

func toolBrowserClick(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *refArg) (*SnapshotResult, error) {
		return br.BrowserClick(ctx, id, a.Ref)
	})(ctx, env, args)
}

func toolBrowserHover(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *refArg) (*SnapshotResult, error) {
		return br.BrowserHover(ctx, id, a.Ref)
	})(ctx, env, args)
}

func toolBrowserType(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *struct {
		Ref    string `arg:"ref,required"`
		Text   string `arg:"text,required"`
		Submit bool   `arg:"submit"`
	}) (*SnapshotResult, error) {
		return br.BrowserType(ctx, id, a.Ref, a.Text, a.Submit)
	})(ctx, env, args)
}

func toolBrowserWaitFor(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *struct {
		Text     string `arg:"text"`
		Selector string `arg:"selector"`
		Gone     bool   `arg:"gone"`
		Timeout  int    `arg:"timeoutSec"`
	}) (*SnapshotResult, error) {
		return br.BrowserWaitFor(ctx, id, a.Text, a.Selector, a.Gone, a.Timeout)
	})(ctx, env, args)
}

// toolBrowserSelect reads values as a list of strings (one string is a list of one).
func toolBrowserSelect(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var values []string
	switch v := args["values"].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return "", argError("argument \"values\" must be a list of strings")
			}
			values = append(values, s)
		}
	case nil:
		return "", argError("missing required argument %q", "values")
	default:
		return "", argError("argument \"values\" must be a list of strings")
	}
	return snapshotTool(nil, func(ctx context.Context, br runBrowsers, id string, a *refArg) (*SnapshotResult, error) {
		return br.BrowserSelect(ctx, id, a.Ref, values)
	})(ctx, env, args)
}

type scrollArgs struct {
	Ref       string `arg:"ref"`
	Direction string `arg:"direction"`
	Pixels    int    `arg:"pixels"`
}

func toolBrowserScroll(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(func(a *scrollArgs) {
		a.Direction, a.Pixels = "down", browserHeight*9/10
	}, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *scrollArgs) (string, error) {
		var dx, dy int
		if a.Ref == "" {
			switch a.Direction {
			case "down":
				dy = a.Pixels
			case "up":
				dy = -a.Pixels
			case "right":
				dx = a.Pixels
			case "left":
				dx = -a.Pixels
			default:
				return "", argError("argument \"direction\" must be down, up, left or right")
			}
		}
		r, err := br.BrowserScroll(ctx, id, a.Ref, dx, dy)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("URL: %s\nScrolled to x=%d y=%d of a %d×%d page (the viewport is %d×%d)", r.URL, r.X, r.Y, r.Width, r.Height, browserWidth, browserHeight), nil
	})(ctx, env, args)
}

func toolBrowserNavigate(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(nil, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *struct {
		Action  string `arg:"action,required"`
		Timeout int    `arg:"timeoutSec"`
	}) (string, error) {
		g, err := br.BrowserNavigate(ctx, id, a.Action, a.Timeout)
		if err != nil {
			return "", err
		}
		return gotoText(g)
	})(ctx, env, args)
}

type tabsArgs struct {
	Action string `arg:"action,required"`
	Index  int    `arg:"index"`
	URL    string `arg:"url"`
}

func toolBrowserTabs(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(func(a *tabsArgs) { a.Index = -1 }, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, a *tabsArgs) (string, error) {
		r, err := br.BrowserTabs(ctx, id, a.Action, a.Index, a.URL, 0)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, t := range r.Tabs {
			mark := " "
			if t.Current {
				mark = "*"
			}
			fmt.Fprintf(&b, "%s %d %q %s\n", mark, t.Index, t.Title, t.URL)
		}
		b.WriteString("(* is the current tab)\n")
		if r.Goto != nil {
			g, err := gotoText(r.Goto)
			return b.String() + g, err
		}
		return b.String(), nil
	})(ctx, env, args)
}

func toolBrowserStatus(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(nil, func(ctx context.Context, _ *toolEnv, br runBrowsers, id string, _ *struct{}) (string, error) {
		st, err := br.BrowserStatus(ctx, id)
		if err != nil {
			return "", err
		}
		if !st.Installed {
			return "No browser in this computer: " + st.Hint, nil
		}
		out := fmt.Sprintf("Browser: %s\nRunning: %v", st.Version, st.Running)
		if st.URL != "" {
			out += fmt.Sprintf("\nPage: %s %q", st.URL, st.Title)
		}
		return out, nil
	})(ctx, env, args)
}

func toolBrowserScreenshot(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	return browserTool(nil, func(ctx context.Context, env *toolEnv, br runBrowsers, id string, a *struct {
		Full bool `arg:"fullPage"`
	}) (string, error) {
		png, err := br.BrowserScreenshot(ctx, id, a.Full)
		if err != nil {
			return "", err
		}
		p := "/work/" + newID("screenshot") + ".png"
		if err := env.ar.rs.computers.WriteFile(ctx, id, p, png); err != nil {
			return "", err
		}
		return fmt.Sprintf("saved a %d-byte PNG screenshot at %s", len(png), p), nil
	})(ctx, env, args)
}
