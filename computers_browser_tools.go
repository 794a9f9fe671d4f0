// computers_browser_tools.go — the model's tools for reading and driving web pages in its computer
// (issue 28): the `browser` bundle (browse, browser_goto, browser_snapshot, browser_click, browser_type,
// browser_screenshot).
//
// Entry points: browserTools (merged into toolCatalog), snapshotText (the lines a model reads:
// `e42 button "Save"`).
//
// Rules: every tool works on the run's own computer through the computer service (computers_browse.go,
// computers_browser.go), so the machine's network policy and the command policy apply as for the API;
// browser_click and browser_type change pages and are dangerous (approvals: runs_guard.go); the others
// only read, and browser_screenshot writes its PNG in /work through the file jail.
package main

import (
	"context"
	"fmt"
	"strings"
)

// runBrowsers is what the browser tools need from the computer service (computerService satisfies it).
type runBrowsers interface {
	Browse(ctx context.Context, id string, req BrowseRequest) (*BrowseResult, error)
	BrowserGoto(ctx context.Context, id, rawURL string, timeoutSec int) (*GotoResult, error)
	BrowserSnapshot(ctx context.Context, id string, limit int) (*SnapshotResult, error)
	BrowserClick(ctx context.Context, id, ref string) (*SnapshotResult, error)
	BrowserType(ctx context.Context, id, ref, text string, submit bool) (*SnapshotResult, error)
	BrowserScreenshot(ctx context.Context, id string, fullPage bool) ([]byte, error)
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

func browserTools() map[string]toolImpl {
	ref := prop("string", `a ref of the last browser_snapshot, such as "e42"`)
	return map[string]toolImpl{
		"browse": {needsComputer: true, run: toolBrowse, def: ToolDef{Name: "browse",
			Description: "Fetch a web page from inside the computer (localhost is the computer's own: use it to look at servers you started there) and return its title, text and links. Scripts are not run; use browser_goto for pages that need them.",
			Parameters: obj([]string{"url"}, map[string]any{"url": prop("string", "http or https URL"),
				"timeoutSec": map[string]any{"type": "integer", "minimum": 1, "maximum": 120}})}},
		"browser_goto": {needsComputer: true, run: toolBrowserGoto, def: ToolDef{Name: "browser_goto",
			Description: "Open a URL in the computer's real browser (Chromium; localhost is the computer's own) and wait for it to load. Then read it with browser_snapshot.",
			Parameters: obj([]string{"url"}, map[string]any{"url": prop("string", "http or https URL"),
				"timeoutSec": map[string]any{"type": "integer", "minimum": 1, "maximum": 300}})}},
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
	}
}

func toolBrowse(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		URL     string `arg:"url,required"`
		Timeout int    `arg:"timeoutSec"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	r, err := br.Browse(ctx, id, BrowseRequest{URL: a.URL, TimeoutSec: a.Timeout})
	if err != nil {
		return "", err
	}
	out := browseText(r)
	if r.Status >= 400 {
		return out, errorf(codeToolError, "the server answered %d", r.Status)
	}
	return out, nil
}

func toolBrowserGoto(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		URL     string `arg:"url,required"`
		Timeout int    `arg:"timeoutSec"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	g, err := br.BrowserGoto(ctx, id, a.URL, a.Timeout)
	if err != nil {
		return "", err
	}
	out := fmt.Sprintf("URL: %s\nTitle: %s\nStatus: %d\nLoaded: %v", g.URL, g.Title, g.Status, g.Loaded)
	if g.Error != "" {
		return out + "\nError: " + g.Error, errorf(codeToolError, "the page did not load: %s", g.Error)
	}
	return out, nil
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
	var a struct {
		Limit int `arg:"limit"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	s, err := br.BrowserSnapshot(ctx, id, a.Limit)
	if err != nil {
		return "", err
	}
	return snapshotText(s), nil
}

func toolBrowserClick(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Ref string `arg:"ref,required"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	s, err := br.BrowserClick(ctx, id, a.Ref)
	if err != nil {
		return "", err
	}
	return snapshotText(s), nil
}

func toolBrowserType(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Ref    string `arg:"ref,required"`
		Text   string `arg:"text,required"`
		Submit bool   `arg:"submit"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	s, err := br.BrowserType(ctx, id, a.Ref, a.Text, a.Submit)
	if err != nil {
		return "", err
	}
	return snapshotText(s), nil
}

func toolBrowserScreenshot(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		Full bool `arg:"fullPage"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	br, id, err := env.browserOf(ctx)
	if err != nil {
		return "", err
	}
	png, err := br.BrowserScreenshot(ctx, id, a.Full)
	if err != nil {
		return "", err
	}
	p := "/work/" + newID("screenshot") + ".png"
	if err := env.ar.rs.computers.WriteFile(ctx, id, p, png); err != nil {
		return "", err
	}
	return fmt.Sprintf("saved a %d-byte PNG screenshot at %s", len(png), p), nil
}
