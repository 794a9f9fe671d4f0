// runs_tools_web.go — the web and http tools: fetch_url, http_request, web_search.
//
// Entry points: toolFetchURL, toolHTTPRequest (registered in toolCatalog, runs_tools.go);
// toolEnv.netRequest, the one way a tool reaches the network on the agent's behalf. web_search is in
// runs_tools_search.go.
// Rules: fetch_url and http_request obey the agent's network policy (private, loopback and link-local
// addresses refused unless named in computer.network.allow; checked on the resolved address at dial time,
// so every redirect and DNS answer is re-checked).
// Every answer is read to a bound; the model is told when it was cut.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// ---- web and http ----

// netPolicy is the agent's computer.network block, applied to fetch_url and http_request.
func (e *toolEnv) netPolicy() netPolicy {
	n := e.ar.spec.Computer.Network
	return netPolicy{mode: n.Mode, allow: n.Allow, deny: n.Deny}
}

const fetchMaxBytes = 5 << 20

// clipBytes keeps at most n bytes of s (0: all), cut on a character boundary, and says what was cut.
func clipBytes(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[truncated at %d of %d bytes (maxBytes)]", cut, len(s))
}

func toolFetchURL(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		URL      string `arg:"url,required"`
		MaxBytes int    `arg:"maxBytes"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	resp, body, err := env.netRequest(ctx, http.MethodGet, a.URL, nil, map[string]any{"User-Agent": "agentd/" + version,
		"Accept": "text/html,text/plain,application/json;q=0.9,*/*;q=0.5"}, 30*time.Second)
	if err != nil {
		return "", err
	}
	ct := resp.Header.Get("Content-Type")
	text := string(body)
	switch {
	case strings.Contains(ct, "html") || (ct == "" && looksHTML(body)):
		text = htmlToText(body)
	case strings.HasPrefix(ct, "text/") || strings.Contains(ct, "json") || strings.Contains(ct, "xml") || strings.Contains(ct, "javascript"):
	default:
		if isBinary(body) {
			text = fmt.Sprintf("[binary content of type %q, %d bytes, not shown]", ct, len(body))
		}
	}
	out := fmt.Sprintf("URL: %s\nStatus: %d\nContent-Type: %s\n\n%s", resp.Request.URL, resp.StatusCode, ct, clipBytes(text, a.MaxBytes))
	if resp.StatusCode >= 400 {
		return out, errorf(codeToolError, "the server answered %d", resp.StatusCode)
	}
	return out, nil
}

// netRequest makes a request the network policy allows and reads at most fetchMaxBytes of the answer.
func (e *toolEnv) netRequest(ctx context.Context, method, rawURL string, body io.Reader, header map[string]any,
	timeout time.Duration) (*http.Response, []byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, argError("not a URL: %v", err)
	}
	np := e.netPolicy()
	if err := np.checkURL(u); err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, nil, argError("bad request: %v", err)
	}
	for k, v := range header {
		if s, ok := v.(string); ok {
			req.Header.Set(k, s)
		}
	}
	client := np.httpClient(timeout)
	defer client.CloseIdleConnections() // the client is this call's: its kept-alive connections too
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fetchError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, fetchMaxBytes))
	if err != nil {
		return nil, nil, fetchError(err)
	}
	return resp, data, nil
}

func looksHTML(b []byte) bool {
	head := strings.ToLower(string(b[:min(len(b), 512)]))
	return strings.Contains(head, "<html") || strings.Contains(head, "<!doctype html")
}

// htmlToText keeps the readable text of a page: no scripts, styles or markup; block elements on lines.
func htmlToText(b []byte) string { return parsePage(b, nil).text }

func collapseBlankLines(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func toolHTTPRequest(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	var a struct {
		URL      string         `arg:"url,required"`
		Method   string         `arg:"method"`
		Body     string         `arg:"body"`
		Headers  map[string]any `arg:"headers"`
		MaxBytes int            `arg:"maxBytes"`
	}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	var body io.Reader
	if a.Body != "" {
		body = strings.NewReader(a.Body)
	}
	resp, data, err := env.netRequest(ctx, strings.ToUpper(firstNonEmpty(a.Method, "GET")), a.URL, body, a.Headers, 60*time.Second)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s\n", resp.Status)
	for _, k := range sortedKeys(resp.Header) {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.Header[k], ", "))
	}
	b.WriteString("\n")
	b.WriteString(clipBytes(string(data), a.MaxBytes))
	return b.String(), nil
}
