// agents.go — the agent spec endpoints: list, create, get, update, delete, validate.
//
// Rules (docs/API.md Agents, DESIGN §3): a body needs `spec` (a JSON object) or `yaml` (a string), else 422;
// an invalid spec is 422 E_SPEC_INVALID with details.issues, except on validate, which answers 200
// {ok, issues?, warnings?} (warnings: unknown tools, a model no provider serves — spec_warnings.go); a duplicate create and a PUT whose spec.name differs from :name are 422; an unknown agent
// is 404 E_AGENT_NOT_FOUND. The stored YAML is the submitted text verbatim, or the spec rendered as YAML
// when JSON was sent. Every create, update and delete re-synchronises the mounted triggers and publishes
// on the `triggers` topic.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// agentBody is the body of create, update and validate.
type agentBody struct {
	Spec json.RawMessage `json:"spec"`
	YAML *string         `json:"yaml"`
}

// AgentSummary is the list and write answer for an agent (docs/API.md AgentSummary).
type AgentSummary struct {
	agentSummaryCore
	UpdatedAt string `json:"updatedAt"`
	RunCount  int    `json:"runCount"`
}

// agentSummaryCore is the part of a summary derived from the spec alone; it is what the store keeps in
// the agents.summary column for fast listings (updatedAt and runCount are added when listing).
type agentSummaryCore struct {
	Name        string          `json:"name"`
	DisplayName string          `json:"displayName"`
	Description string          `json:"description"`
	Model       string          `json:"model"`
	Version     string          `json:"version"`
	Tools       []string        `json:"tools"`
	Triggers    []TriggerSpec   `json:"triggers"`
	Computer    agentComputerOf `json:"computer"`
}

type agentComputerOf struct {
	Enabled bool   `json:"enabled"`
	Flavor  string `json:"flavor"`
}

func summarise(spec *AgentSpec, updatedAt string, runCount int) AgentSummary {
	triggers := make([]TriggerSpec, len(spec.Triggers))
	for i, t := range spec.Triggers {
		t.Secret = "" // a listing never carries a webhook secret
		triggers[i] = t
	}
	return AgentSummary{
		agentSummaryCore: agentSummaryCore{
			Name: spec.Name, DisplayName: spec.DisplayName, Description: spec.Description, Model: spec.Model,
			Version: spec.Version, Tools: spec.Tools, Triggers: triggers,
			Computer: agentComputerOf{Enabled: spec.Computer.IsEnabled(), Flavor: spec.Computer.Flavor},
		},
		UpdatedAt: updatedAt, RunCount: runCount,
	}
}

// readAgentBody decodes the body strictly and parses the spec. A malformed body is an error; spec
// problems come back as issues (with the YAML to store when the spec is valid).
func readAgentBody(r *http.Request) (spec *AgentSpec, yamlText string, issues []string, err error) {
	raw, err := readBody(r)
	if err != nil {
		return nil, "", nil, err
	}
	switch specBodyKind(r.Header.Get("Content-Type"), raw) {
	case "yaml": // `curl --data-binary @agent.yaml -H 'Content-Type: application/yaml'`, as with kubectl
		spec, issues = parseSpecYAML(string(raw))
		return spec, string(raw), issues, nil
	case "":
		return nil, "", nil, errorf(codeSpecInvalid, "Content-Type %q is not accepted here", r.Header.Get("Content-Type")).
			withHint("send the spec as YAML (application/yaml, application/x-yaml or text/yaml) or as JSON (application/json: {\"spec\": {...}} or {\"yaml\": \"...\"})")
	}
	var body agentBody
	if err := decodeBytes(raw, &body); err != nil {
		return nil, "", nil, err
	}
	hasSpec := len(body.Spec) > 0 && string(body.Spec) != "null"
	switch {
	case hasSpec && body.YAML != nil:
		return nil, "", nil, errorf(codeSpecInvalid, "body has both spec and yaml; send one").
			withHint(`send {"spec": {...}} or {"yaml": "..."}`)
	case hasSpec:
		spec, issues = parseSpecJSON(body.Spec)
		if spec != nil {
			yamlText = renderSpecYAML(spec)
		}
	case body.YAML != nil:
		spec, issues = parseSpecYAML(*body.YAML)
		yamlText = *body.YAML
	default:
		return nil, "", nil, errorf(codeSpecInvalid, "body needs spec (a JSON object) or yaml (a string)").
			withHint(`send {"spec": {"name": "my-agent"}} or {"yaml": "name: my-agent"}`)
	}
	return spec, yamlText, issues, nil
}

// specBodyKind reads a spec body's type: "json", "yaml", or "" for a type that is neither. No type, and
// curl's default form type, are JSON when the body looks like a JSON object.
func specBodyKind(contentType string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml" || mt == "text/x-yaml":
		return "yaml"
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return "json"
	case mt == "" || mt == "application/x-www-form-urlencoded":
		if t := bytes.TrimSpace(body); len(t) == 0 || t[0] == '{' {
			return "json"
		}
	}
	return ""
}

func (s *server) handleValidateAgent(w http.ResponseWriter, r *http.Request) error {
	spec, _, issues, err := readAgentBody(r)
	if err != nil {
		return err
	}
	out := map[string]any{"ok": len(issues) == 0}
	if len(issues) > 0 {
		out["issues"] = issues
	}
	// Legal but will not work (spec_warnings.go): only when there are some, so {ok, issues?} is unchanged.
	if spec != nil {
		if ws := s.specWarnings(spec); len(ws) > 0 {
			out["warnings"] = ws
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleListAgents assembles the answer from the stored summaries without decoding any spec: each
// summary is a JSON object to which updatedAt and runCount are appended.
func (s *server) handleListAgents(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.store.ListAgentSummaries(r.Context())
	if err != nil {
		return err
	}
	counts, err := s.store.RunCounts(r.Context())
	if err != nil {
		return err
	}
	buf := make([]byte, 0, 64+len(rows)*400)
	buf = append(buf, `{"agents":[`...)
	for i, row := range rows {
		sum := row.SummaryJSON
		if len(sum) < 2 || sum[len(sum)-1] != '}' {
			// A row written before the summary column was filled: build it from the spec.
			spec, err := s.loadAgent(r.Context(), row.Name)
			if err != nil {
				s.log.Warn("skipping an unreadable stored agent", "agent", row.Name, "err", err)
				continue
			}
			sum = agentSummaryJSON(spec)
		}
		if i > 0 && buf[len(buf)-1] != '[' {
			buf = append(buf, ',')
		}
		buf = append(buf, sum[:len(sum)-1]...)
		buf = append(buf, `,"updatedAt":`...)
		buf = strconv.AppendQuote(buf, row.UpdatedAt)
		buf = append(buf, `,"runCount":`...)
		buf = strconv.AppendInt(buf, int64(counts[row.Name]), 10)
		buf = append(buf, '}')
	}
	buf = append(buf, "]}\n"...)
	writeRawJSON(w, http.StatusOK, buf)
	return nil
}

// agentSummaryJSON is the stored summary: AgentSummary without updatedAt and runCount, as a JSON object.
func agentSummaryJSON(spec *AgentSpec) string {
	b, _ := json.Marshal(summarise(spec, "", 0).agentSummaryCore)
	return string(b)
}

func (s *server) handleCreateAgent(w http.ResponseWriter, r *http.Request) error {
	spec, row, err := s.readValidAgent(r)
	if err != nil {
		return err
	}
	created, err := s.store.CreateAgent(r.Context(), row)
	if err != nil {
		return err
	}
	if !created {
		return errorf(codeSpecInvalid, "agent %q already exists", spec.Name).
			withHint("update it with PUT /v1/agents/" + spec.Name + ", or delete it first")
	}
	sum := s.agentChanged(r.Context(), "agent_created", spec, row.UpdatedAt)
	writeJSON(w, http.StatusCreated, sum)
	return nil
}

func (s *server) handleGetAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	row, err := s.store.GetAgent(r.Context(), name)
	if errors.Is(err, errNotFound) {
		return agentNotFound(name)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"spec": json.RawMessage(row.SpecJSON), "yaml": row.YAML})
	return nil
}

func (s *server) handlePutAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	spec, row, err := s.readValidAgent(r)
	if err != nil {
		return err
	}
	if spec.Name != name {
		return errorf(codeSpecInvalid, "spec.name %q does not match the agent %q in the path", spec.Name, name).
			withHint("renaming is a DELETE of /v1/agents/" + name + " then a POST of the new spec to /v1/agents")
	}
	if err := s.store.UpdateAgent(r.Context(), row); errors.Is(err, errNotFound) {
		return agentNotFound(name).withHint("create it with POST /v1/agents")
	} else if err != nil {
		return err
	}
	sum := s.agentChanged(r.Context(), "agent_updated", spec, row.UpdatedAt)
	writeJSON(w, http.StatusOK, sum)
	return nil
}

func (s *server) handleDeleteAgent(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := s.store.DeleteAgent(r.Context(), name); errors.Is(err, errNotFound) {
		return agentNotFound(name)
	} else if err != nil {
		return err
	}
	s.hub.publish("triggers", "agent_deleted", map[string]any{"name": name})
	s.triggers.sync(r.Context(), "agent_deleted", name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func agentNotFound(name string) *apiError {
	return errorf(codeAgentNotFound, "agent %q not found", name).withHint("list agents with GET /v1/agents")
}

// readValidAgent reads the body of a create or an update: a spec with issues is the 422, a valid one
// comes with its stored form.
func (s *server) readValidAgent(r *http.Request) (*AgentSpec, agentRow, error) {
	spec, yamlText, issues, err := readAgentBody(r)
	if err != nil {
		return nil, agentRow{}, err
	}
	if len(issues) > 0 {
		return nil, agentRow{}, specIssuesError("agent spec", issues)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, agentRow{}, errorf(codeInternal, "encoding the spec: %v", err)
	}
	now := timestamp(s.store.now())
	return spec, agentRow{Name: spec.Name, YAML: yamlText, SpecJSON: string(b), CreatedAt: now, UpdatedAt: now}, nil
}

// agentChanged re-synchronises triggers and publishes the change; it returns the agent's summary.
func (s *server) agentChanged(ctx context.Context, typ string, spec *AgentSpec, updatedAt string) AgentSummary {
	runs, err := s.store.RunCountOf(ctx, spec.Name)
	if err != nil {
		s.log.Warn("counting runs", "agent", spec.Name, "err", err)
	}
	sum := summarise(spec, updatedAt, runs)
	s.hub.publish("triggers", typ, sum)
	s.triggers.sync(ctx, typ, spec.Name)
	return sum
}

// loadAgent reads a stored agent's spec (defaults applied); 404 E_AGENT_NOT_FOUND names a missing one.
func (s *server) loadAgent(ctx context.Context, name string) (*AgentSpec, error) {
	row, err := s.store.GetAgent(ctx, name)
	if errors.Is(err, errNotFound) {
		return nil, agentNotFound(name)
	}
	if err != nil {
		return nil, err
	}
	var spec AgentSpec
	if err := json.Unmarshal([]byte(row.SpecJSON), &spec); err != nil {
		return nil, errorf(codeInternal, "stored spec of agent %q is unreadable: %v", name, err)
	}
	return &spec, nil
}
