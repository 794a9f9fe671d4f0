// runs_tools_search.go — the web_search tool: Brave Search and Tavily, in their own wire formats.
//
// Entry points: toolWebSearch (registered in toolCatalog, runs_tools.go), searchProviders (which APIs
// are configured; resolveTools offers web_search only when one is).
// Rules: a provider is configured by its key in the server's environment (BRAVE_API_KEY: GET
// /res/v1/web/search with X-Subscription-Token; TAVILY_API_KEY: POST /search with a bearer token);
// BRAVE_BASE_URL and TAVILY_BASE_URL point them elsewhere (a proxy, a test). Brave is asked first when
// both are set; one that fails hands over to the next, and the error names each failure. `limit` is
// 1-20 (the most either API returns). Keys are never in a result or an error (the run's redactor also
// knows both). Answers are read to 4 MB; snippets are turned from HTML into text.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// searchResult is one hit, whatever the provider.
type searchResult struct{ title, url, snippet string }

// searchProvider is one configured search API.
type searchProvider struct {
	name, key, base string
	search          func(ctx context.Context, p searchProvider, query string, limit int) ([]searchResult, error)
}

// searchProviders are the configured search APIs, in the order they are asked.
func searchProviders(getenv func(string) string) []searchProvider {
	var out []searchProvider
	if k := getenv("BRAVE_API_KEY"); k != "" {
		out = append(out, searchProvider{name: "brave", key: k, search: braveSearch,
			base: strings.TrimRight(firstNonEmpty(getenv("BRAVE_BASE_URL"), "https://api.search.brave.com/res/v1"), "/")})
	}
	if k := getenv("TAVILY_API_KEY"); k != "" {
		out = append(out, searchProvider{name: "tavily", key: k, search: tavilySearch,
			base: strings.TrimRight(firstNonEmpty(getenv("TAVILY_BASE_URL"), "https://api.tavily.com"), "/")})
	}
	return out
}

func toolWebSearch(ctx context.Context, env *toolEnv, args map[string]any) (string, error) {
	a := struct {
		Query string `arg:"query,required"`
		Limit int    `arg:"limit|count"`
	}{Limit: 8}
	if err := toolArgs(args, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Query) == "" {
		return "", argError("query is empty")
	}
	if a.Limit < 1 || a.Limit > 20 {
		return "", argError("limit must be between 1 and 20, not %d", a.Limit)
	}
	providers := searchProviders(env.ar.rs.getenv)
	if len(providers) == 0 {
		return "", errorf(codeToolError, "web search is not configured").withHint("set BRAVE_API_KEY or TAVILY_API_KEY in the server's environment")
	}
	var failures []string
	for _, p := range providers {
		results, err := p.search(ctx, p, a.Query, a.Limit)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			failures = append(failures, p.name+": "+err.Error())
			continue
		}
		if len(results) == 0 {
			return "no results", nil
		}
		var b strings.Builder
		for i, r := range results[:min(len(results), a.Limit)] {
			fmt.Fprintf(&b, "%d. %s\n   %s\n   %s\n", i+1, r.title, r.url, htmlToText([]byte(r.snippet)))
		}
		return b.String(), nil
	}
	return "", errorf(codeToolError, "web search failed: %s", strings.Join(failures, "; "))
}

// searchCall makes one request to a search API and decodes its JSON answer into out; a non-2xx answer
// is an error naming the status and the API's own message, if any.
func searchCall(req *http.Request, out any) error {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "agentd/"+version)
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the cause is what helps (the URL carries the query, never a key)
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %v", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s%s", resp.Status, apiMessage(body))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("answer unreadable: %v", err)
	}
	return nil
}

// apiMessage is the short message a search API put in an error body: Brave's error.detail, Tavily's
// detail.error or detail.
func apiMessage(body []byte) string {
	var e struct {
		Error  struct{ Detail string } `json:"error"`
		Detail json.RawMessage         `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	msg := e.Error.Detail
	if msg == "" && len(e.Detail) > 0 {
		var d struct{ Error string }
		var s string
		if json.Unmarshal(e.Detail, &d) == nil && d.Error != "" {
			msg = d.Error
		} else if json.Unmarshal(e.Detail, &s) == nil {
			msg = s
		}
	}
	if msg == "" {
		return ""
	}
	return ": " + clip(oneLine(msg), 200)
}

// braveSearch: GET {base}/web/search?q=&count= with X-Subscription-Token; hits in web.results.
func braveSearch(ctx context.Context, p searchProvider, query string, limit int) ([]searchResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/web/search?"+url.Values{
		"q": {query}, "count": {fmt.Sprint(limit)}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Subscription-Token", p.key)
	var out struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := searchCall(req, &out); err != nil {
		return nil, err
	}
	var res []searchResult
	for _, r := range out.Web.Results {
		res = append(res, searchResult{r.Title, r.URL, r.Description})
	}
	return res, nil
}

// tavilySearch: POST {base}/search with Authorization: Bearer and {query, max_results, search_depth};
// hits in results[] with content as the snippet.
func tavilySearch(ctx context.Context, p searchProvider, query string, limit int) ([]searchResult, error) {
	body, _ := json.Marshal(map[string]any{"query": query, "max_results": limit, "search_depth": "basic",
		"include_answer": false, "include_raw_content": false, "include_images": false})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/search", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.key)
	var out struct {
		Results []struct {
			Title   string  `json:"title"`
			URL     string  `json:"url"`
			Content string  `json:"content"`
			Score   float64 `json:"score"`
		} `json:"results"`
	}
	if err := searchCall(req, &out); err != nil {
		return nil, err
	}
	var res []searchResult
	for _, r := range out.Results {
		res = append(res, searchResult{r.Title, r.URL, r.Content})
	}
	return res, nil
}
