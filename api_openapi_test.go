package main

// The OpenAPI document (api_openapi.yaml): it lists exactly the routes of routes() with the same methods,
// every request example in it is accepted by a live server, and an npm OpenAPI 3.1 validator accepts it
// (interop/openapi).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var openAPIMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// routePatterns reads the patterns routes() registers, from api.go's source: the mux keeps no list.
func routePatterns(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("api.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	i := strings.Index(body, "func (s *server) routes() *http.ServeMux {")
	j := strings.Index(body[i:], "\n}\n")
	var out []string
	for _, m := range regexp.MustCompile(`mux\.HandleFunc\("([^"]+)"`).FindAllStringSubmatch(body[i:i+j], -1) {
		out = append(out, m[1])
	}
	if len(out) < 40 {
		t.Fatalf("read only %d route patterns from routes(): %v", len(out), out)
	}
	return out
}

// anyMethodRoutes are the patterns registered without a method, with the methods they serve.
var anyMethodRoutes = map[string][]string{
	"/v1/t/{agent}":           {"delete", "get", "patch", "post", "put"}, // an http trigger: any method
	"/v1/t/{agent}/{path...}": {"delete", "get", "patch", "post", "put"},
	"/mcp":                    {"delete", "get", "post"}, // GET: the session's server-to-client stream
	"/":                       {"get"},                   // the dashboard; every other method is E_ROUTE_NOT_FOUND
}

func TestOpenAPIRoutesParity(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range routePatterns(t) {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		if path == "/openai/" { // the OpenAI-shaped 404 for the rest of /openai/: no route of its own
			continue
		}
		methods := []string{strings.ToLower(method)}
		if method == "" {
			if methods = anyMethodRoutes[path]; methods == nil {
				t.Fatalf("pattern %q has no method and is not in anyMethodRoutes: say which methods it serves", p)
			}
		}
		path = strings.ReplaceAll(path, "...}", "}") // {path...}: OpenAPI has no wildcard; the doc says so
		for _, m := range methods {
			want[strings.ToUpper(m)+" "+path] = true
		}
	}
	got := map[string]bool{}
	for path, item := range doc["paths"].(map[string]any) {
		for k := range item.(map[string]any) {
			if slices.Contains(openAPIMethods, k) {
				got[strings.ToUpper(k)+" "+path] = true
			}
		}
	}
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("the OpenAPI document and routes() differ:\n  routes the document lacks: %v\n  operations routes() lacks: %v", missing, extra)
	}
	// Every operation answers errors with the envelope (or, on /openai and /mcp, their own protocol's).
	for path, item := range doc["paths"].(map[string]any) {
		for k, op := range item.(map[string]any) {
			if !slices.Contains(openAPIMethods, k) || path == "/" {
				continue
			}
			resp := op.(map[string]any)["responses"].(map[string]any)
			if _, ok := resp["default"]; !ok {
				t.Errorf("%s %s: no default (error) response", strings.ToUpper(k), path)
			}
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	ts := newTestServer(t, withEnv(map[string]string{"AGENT_TOKEN": "x"}))
	r := ts.do("GET", "/openapi.json", nil)
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc map[string]any
	if err := json.Unmarshal(r.body, &doc); err != nil || doc["openapi"] != "3.1.0" {
		t.Fatalf("not an OpenAPI 3.1 document (%v): %.200s", err, r.body)
	}
	// The error envelope and every code of the contract are in it.
	codes := doc["components"].(map[string]any)["schemas"].(map[string]any)["ErrorCode"].(map[string]any)["enum"].([]any)
	for code := range statusOf {
		if !slices.Contains(codes, any(code)) {
			t.Errorf("ErrorCode lacks %s", code)
		}
	}
}

// openAPIExample is one request example of the document.
type openAPIExample struct {
	method, path, contentType string
	body                      any
}

func openAPIExamples(t *testing.T, doc map[string]any) []openAPIExample {
	t.Helper()
	comps := doc["components"].(map[string]any)
	resolve := func(v map[string]any) map[string]any {
		if ref, ok := v["$ref"].(string); ok {
			parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
			return comps[parts[0]].(map[string]any)[parts[1]].(map[string]any)
		}
		return v
	}
	var out []openAPIExample
	for path, item := range doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			if !slices.Contains(openAPIMethods, m) {
				continue
			}
			rb, ok := op.(map[string]any)["requestBody"].(map[string]any)
			if !ok {
				continue
			}
			for ct, media := range resolve(rb)["content"].(map[string]any) {
				if ex, ok := media.(map[string]any)["example"]; ok {
					out = append(out, openAPIExample{strings.ToUpper(m), path, ct, ex})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out
}

// TestOpenAPIExamplesAccepted sends every request example of the document to a live server (real
// computers on the local provider, runs against a scripted model on loopback): none is refused as a bad
// body (400, 415, 422) or breaks the server (500).
func TestOpenAPIExamplesAccepted(t *testing.T) {
	doc, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	so := newScriptedOpenAI(t, stepwise(scriptReply{text: "Hello!"}))
	te := newE2E(t, so, "", func(c *testSetup) { c.ComputerProvider = "local" })
	var box ComputerInfo
	te.call("POST", "/v1/computers", map[string]any{"name": "openapi-box"}, 201, &box)
	examples := openAPIExamples(t, doc)
	if len(examples) < 10 {
		t.Fatalf("only %d request examples in the document", len(examples))
	}
	const agent = "openapi-example"
	for _, ex := range examples {
		t.Run(ex.method+" "+ex.path, func(t *testing.T) {
			// The fixture each route needs: the example agent absent before its creation, present otherwise.
			switch {
			case ex.method == "POST" && ex.path == "/v1/agents":
				te.do("DELETE", "/v1/agents/"+agent, nil)
			case strings.Contains(ex.path, "{name}"):
				if te.do("GET", "/v1/agents/"+agent, nil).status == 404 {
					te.createAgent(map[string]any{"name": agent})
				}
			}
			path := strings.NewReplacer("{name}", agent, "{id}", box.ID, "{agent}", agent, "{path}", "hook").Replace(ex.path)
			if strings.Contains(ex.path, "/fs") {
				path += "?path=/work/openapi-example.txt"
			}
			var body []byte
			if s, ok := ex.body.(string); ok && ex.contentType != "application/json" {
				body = []byte(s)
			} else {
				body, _ = json.Marshal(ex.body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, ex.method, te.url+path, bytes.NewReader(body))
			req.Header.Set("Content-Type", ex.contentType)
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if s := resp.StatusCode; s == 400 || s == 415 || s == 422 || s == 500 {
				t.Fatalf("the example %s is refused: %d %.400s", body, s, got)
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && bytes.Contains(got, []byte(`"type":"error"`)) {
				t.Fatalf("the example %s ends its stream in an error: %.600s", body, got)
			}
		})
	}
}

// TestInteropOpenAPIValidator validates the served document with @seriousme/openapi-schema-validator
// (interop/openapi, on npm's Node 22). It skips without interop/openapi/node_modules unless
// AGENT_TEST_INTEROP=1.
func TestInteropOpenAPIValidator(t *testing.T) {
	dir, node := interopNode(t, "openapi")
	ts := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AGENTD_URL="+ts.url)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "openapi interop: ok") {
		t.Fatalf("check.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
