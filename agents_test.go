package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestAgentsCRUD(t *testing.T) {
	ts := newTestServer(t)
	sub, _ := ts.s.hub.subscribe()
	defer ts.s.hub.unsubscribe(sub)

	yamlText := "# my agent\nname: notes\ndescription: takes notes\ntriggers:\n  - type: webhook\n    path: /gh\n    secret: shh\n"
	res := ts.do("POST", "/v1/agents", map[string]any{"yaml": yamlText})
	if res.status != http.StatusCreated {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	sum := res.json(t)
	if sum["name"] != "notes" || sum["runCount"] != float64(0) || sum["model"] != "auto" || sum["version"] != "0.1.0" {
		t.Fatalf("summary %s", res.body)
	}
	if c := sum["computer"].(map[string]any); c["enabled"] != true || c["flavor"] != "base" {
		t.Fatalf("summary computer %v", c)
	}
	if strings.Contains(string(res.body), "shh") {
		t.Fatalf("summary leaks the webhook secret: %s", res.body)
	}
	if ev := <-sub.ch; ev.Topic != "triggers" || ev.Type != "agent_created" {
		t.Fatalf("event %+v", ev)
	}

	// Duplicate create.
	res = ts.do("POST", "/v1/agents", map[string]any{"yaml": yamlText})
	if res.status != 422 || res.errCode(t) != codeSpecInvalid || res.errMessage(t) != `agent "notes" already exists` ||
		!strings.Contains(res.json(t)["error"].(map[string]any)["hint"].(string), "PUT") {
		t.Fatalf("duplicate: %d %s", res.status, res.body)
	}

	// GET returns the spec with defaults and the YAML verbatim.
	res = ts.do("GET", "/v1/agents/notes", nil)
	var got struct {
		Spec AgentSpec `json:"spec"`
		YAML string    `json:"yaml"`
	}
	if err := json.Unmarshal(res.body, &got); err != nil || res.status != 200 {
		t.Fatalf("get: %d %s", res.status, res.body)
	}
	if got.YAML != yamlText || got.Spec.Limits.MaxSteps != 24 || got.Spec.Triggers[0].Secret != "shh" {
		t.Fatalf("get: %s", res.body)
	}

	// JSON create: the stored YAML is the spec rendered.
	res = ts.do("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": "j", "limits": map[string]any{"maxSteps": 3}}})
	if res.status != 201 {
		t.Fatalf("json create: %d %s", res.status, res.body)
	}
	res = ts.do("GET", "/v1/agents/j", nil)
	json.Unmarshal(res.body, &got)
	if spec, issues := parseSpecYAML(got.YAML); len(issues) > 0 || spec.Limits.MaxSteps != 3 || spec.Name != "j" {
		t.Fatalf("rendered yaml %q: %v", got.YAML, issues)
	}

	// List.
	res = ts.do("GET", "/v1/agents", nil)
	var list struct{ Agents []AgentSummary }
	json.Unmarshal(res.body, &list)
	if len(list.Agents) != 2 || list.Agents[0].Name != "j" || list.Agents[1].Name != "notes" {
		t.Fatalf("list: %s", res.body)
	}

	// PUT: name mismatch, invalid, unknown, ok.
	res = ts.do("PUT", "/v1/agents/notes", map[string]any{"yaml": "name: other\n"})
	if res.status != 422 || !strings.Contains(res.json(t)["error"].(map[string]any)["hint"].(string), "DELETE") {
		t.Fatalf("mismatch: %d %s", res.status, res.body)
	}
	res = ts.do("PUT", "/v1/agents/notes", map[string]any{"yaml": "name: notes\nlimits: {maxSteps: 900}\n"})
	if res.status != 422 || res.errCode(t) != codeSpecInvalid {
		t.Fatalf("invalid put: %d %s", res.status, res.body)
	}
	issues, _ := res.json(t)["error"].(map[string]any)["details"].(map[string]any)["issues"].([]any)
	if len(issues) != 1 || issues[0] != "limits.maxSteps: Number must be less than or equal to 500" {
		t.Fatalf("details.issues: %s", res.body)
	}
	res = ts.do("PUT", "/v1/agents/ghost", map[string]any{"yaml": "name: ghost\n"})
	if res.status != 404 || res.errCode(t) != codeAgentNotFound {
		t.Fatalf("unknown put: %d %s", res.status, res.body)
	}
	res = ts.do("PUT", "/v1/agents/notes", map[string]any{"yaml": "name: notes\nmodel: free\n"})
	if res.status != 200 || res.json(t)["model"] != "free" {
		t.Fatalf("put: %d %s", res.status, res.body)
	}

	// DELETE.
	if res = ts.do("DELETE", "/v1/agents/notes", nil); res.status != 204 || len(res.body) != 0 {
		t.Fatalf("delete: %d %s", res.status, res.body)
	}
	if res = ts.do("DELETE", "/v1/agents/notes", nil); res.status != 404 || res.errCode(t) != codeAgentNotFound {
		t.Fatalf("second delete: %d %s", res.status, res.body)
	}
	if res = ts.do("GET", "/v1/agents/notes", nil); res.status != 404 || !strings.Contains(res.errMessage(t), `"notes"`) {
		t.Fatalf("get deleted: %d %s", res.status, res.body)
	}

	var types []string
	for len(sub.ch) > 0 {
		ev := <-sub.ch
		types = append(types, ev.Type)
	}
	// Each change, then the trigger sync it caused.
	if !slices.Equal(types, []string{"triggers_synced", "agent_created", "triggers_synced", "agent_updated", "triggers_synced", "agent_deleted", "triggers_synced"}) {
		t.Fatalf("events %v", types)
	}
}

func TestAgentBodies(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		wantMsg            string
	}{
		{"neither", "POST", "/v1/agents", `{}`, 422, "body needs spec"},
		{"both", "POST", "/v1/agents", `{"spec":{"name":"a"},"yaml":"name: a"}`, 422, "both spec and yaml"},
		{"null spec", "POST", "/v1/agents/validate", `{"spec":null}`, 422, "body needs spec"},
		{"unknown body key", "POST", "/v1/agents", `{"spec":{"name":"a"},"force":true}`, 422, "Unrecognized key(s) in object: 'force'"},
		{"yaml wrong type", "POST", "/v1/agents", `{"yaml":5}`, 422, "yaml"},
		{"malformed", "POST", "/v1/agents", `{"yaml":`, 422, "malformed JSON"},
		{"empty body", "POST", "/v1/agents", ``, 422, "empty"},
		{"non-UTF-8", "POST", "/v1/agents", "{\"yaml\":\"name: \xff\"}", 422, "UTF-8"},
		{"invalid spec", "POST", "/v1/agents", `{"spec":{"name":"A"}}`, 422, "invalid agent spec: name: name must be"},
		{"invalid yaml", "POST", "/v1/agents", `{"yaml":"name: [\n"}`, 422, "Invalid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.do(tc.method, tc.path, tc.body)
			if res.status != tc.status || res.errCode(t) != codeSpecInvalid || !strings.Contains(res.errMessage(t), tc.wantMsg) {
				t.Fatalf("%d %s", res.status, res.body)
			}
		})
	}
	if res := ts.do("GET", "/health", nil); res.status != 200 {
		t.Fatalf("server stopped serving: %d", res.status)
	}
}

func TestAgentValidate(t *testing.T) {
	ts := newTestServer(t)
	res := ts.do("POST", "/v1/agents/validate", map[string]any{"yaml": mustReadFile(t, "testdata/full-spec.yaml")})
	// Valid; this server has no model keys, so the spec's models come back as warnings (spec_warnings.go).
	if m := res.json(t); res.status != 200 || m["ok"] != true || m["issues"] != nil || !strings.Contains(fmt.Sprint(m["warnings"]), "model: anthropic/claude-sonnet-4-5: ") {
		t.Fatalf("valid: %d %s", res.status, res.body)
	}
	res = ts.do("POST", "/v1/agents/validate", map[string]any{"spec": map[string]any{"name": "a", "limits": map[string]any{"maxSteps": 501}, "x": 1}})
	m := res.json(t)
	if res.status != 200 || m["ok"] != false || len(m["issues"].([]any)) != 2 {
		t.Fatalf("invalid: %d %s", res.status, res.body)
	}
	res = ts.do("POST", "/v1/agents/validate", map[string]any{"yaml": billionLaughs()})
	if m := res.json(t); res.status != 200 || m["ok"] != false {
		t.Fatalf("alias bomb: %d %s", res.status, res.body)
	}
	// Nothing was stored by validate.
	if res := ts.do("GET", "/v1/agents/a", nil); res.status != 404 {
		t.Fatalf("validate stored an agent: %d", res.status)
	}
}

func TestAgentListWithoutStoredSummary(t *testing.T) {
	ts := newTestServer(t)
	for _, n := range []string{"a", "b", "c"} {
		ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: " + n + "\nmodel: free\n"})
	}
	// Rows whose summary column is empty (older writers) are summarised from their spec.
	if _, err := ts.s.store.db.Exec(`UPDATE agents SET summary = '' WHERE name IN ('a', 'c')`); err != nil {
		t.Fatal(err)
	}
	res := ts.do("GET", "/v1/agents", nil)
	var list struct{ Agents []AgentSummary }
	if err := json.Unmarshal(res.body, &list); err != nil {
		t.Fatalf("%v: %s", err, res.body)
	}
	if len(list.Agents) != 3 {
		t.Fatalf("list %s", res.body)
	}
	for i, a := range list.Agents {
		if a.Name != []string{"a", "b", "c"}[i] || a.Model != "free" || a.UpdatedAt == "" || a.Tools[0] != "computer" {
			t.Fatalf("agent %d: %+v", i, a)
		}
	}
}

// TestBadInputKeepsServing sends each kind of bad input of the issue's list and checks the envelope, that
// nothing was stored, and that the server still answers.
func TestBadInputKeepsServing(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		name string
		body any
		want string
	}{
		{"malformed JSON", `{"yaml": "name: a"`, "malformed JSON"},
		{"wrong type in the body", `{"yaml": 42}`, "yaml: Expected string, received number"},
		{"wrong type in the spec", `{"spec": {"name": "a", "limits": {"maxSteps": "ten"}}}`, "limits.maxSteps: Expected number, received string"},
		{"unknown top-level key", `{"spec": {"name": "a", "colour": "red"}}`, "(root): Unrecognized key(s) in object: 'colour'"},
		{"unknown nested key", `{"spec": {"name": "a", "computer": {"network": {"mode": "none", "vpn": true}}}}`, "computer.network: Unrecognized key(s) in object: 'vpn'"},
		{"invalid YAML", map[string]any{"yaml": "name: a\n\tlimits: {"}, "Invalid YAML"},
		{"YAML alias bomb", map[string]any{"yaml": billionLaughs()}, "anchors and aliases are not supported"},
		{"non-UTF-8 body", "{\"yaml\": \"name: \xfe\xff\"}", "not valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.do("POST", "/v1/agents", tc.body)
			if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(string(res.body), tc.want) {
				t.Fatalf("%d %s", res.status, res.body)
			}
			if h := ts.do("GET", "/health", nil); h.status != 200 {
				t.Fatal("the server stopped answering")
			}
		})
	}
	if res := ts.do("GET", "/v1/agents", nil); string(res.body) != "{\"agents\":[]}\n" {
		t.Fatalf("bad input stored something: %s", res.body)
	}
}

// A YAML body with a YAML type is the spec, on create, update and validate; other non-JSON types are
// refused with the accepted ones named; curl's default type still works for a JSON body.
func TestAgentYAMLBodies(t *testing.T) {
	ts := newTestServer(t)
	spec := "name: yammy\ndescription: from a file\n"
	for _, ct := range []string{"application/yaml", "application/x-yaml", "text/yaml; charset=utf-8"} {
		if res := ts.do("POST", "/v1/agents/validate", spec, "Content-Type", ct); res.status != 200 || res.json(t)["ok"] != true {
			t.Fatalf("validate %s: %d %s", ct, res.status, res.body)
		}
	}
	if res := ts.do("POST", "/v1/agents/validate", "name: Bad\n", "Content-Type", "application/yaml"); res.json(t)["ok"] != false {
		t.Fatalf("invalid yaml spec: %s", res.body)
	}
	if res := ts.do("POST", "/v1/agents", spec, "Content-Type", "application/yaml"); res.status != 201 || res.json(t)["description"] != "from a file" {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	if res := ts.do("PUT", "/v1/agents/yammy", "name: yammy\ndescription: updated\n", "Content-Type", "application/x-yaml"); res.status != 200 || res.json(t)["description"] != "updated" {
		t.Fatalf("put: %d %s", res.status, res.body)
	}
	if res := ts.do("GET", "/v1/agents/yammy", nil); res.json(t)["yaml"] != "name: yammy\ndescription: updated\n" {
		t.Fatalf("the YAML text is kept as sent: %s", res.body)
	}
	res := ts.do("POST", "/v1/agents", spec, "Content-Type", "text/plain")
	if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(string(res.body), "application/yaml") {
		t.Fatalf("text/plain: %d %s", res.status, res.body)
	}
	if res := ts.do("POST", "/v1/agents/validate", `{"yaml":"name: a\n"}`, "Content-Type", "application/x-www-form-urlencoded"); res.status != 200 || res.json(t)["ok"] != true {
		t.Fatalf("curl's default type with JSON: %d %s", res.status, res.body)
	}
}
