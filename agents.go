// agents.go — the agent spec endpoints: list, create, get, update, delete, validate.
//
// Rules (API.md Agents): a body needs `spec` or `yaml` (else 422); PUT requires spec.name == :name;
// validate answers 200 {ok, issues?} and never 422 for spec problems; an unknown agent is 404
// E_AGENT_NOT_FOUND; every create, update and delete re-synchronises the mounted triggers and publishes
// on the `triggers` topic.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
)

// loadAgent reads a stored agent's spec (defaults applied); 404 E_AGENT_NOT_FOUND names a missing one.
func (s *server) loadAgent(ctx context.Context, name string) (*AgentSpec, error) {
	row, err := s.store.GetAgent(ctx, name)
	if errors.Is(err, errNotFound) {
		return nil, errorf(codeAgentNotFound, "agent %q not found", name).withHint("list agents with GET /v1/agents")
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

func (s *server) handleListAgents(w http.ResponseWriter, r *http.Request)    { notImplemented(w) }
func (s *server) handleCreateAgent(w http.ResponseWriter, r *http.Request)   { notImplemented(w) }
func (s *server) handleValidateAgent(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
func (s *server) handleGetAgent(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handlePutAgent(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handleDeleteAgent(w http.ResponseWriter, r *http.Request)   { notImplemented(w) }

// notImplemented is the placeholder answer of a route whose capability has not landed yet.
func notImplemented(w http.ResponseWriter) {
	writeError(w, errorf(codeNotImplemented, "not implemented yet").withHint("this capability lands in a later release"))
}
