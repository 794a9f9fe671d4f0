// agents.go — the agent spec endpoints: list, create, get, update, delete, validate.
//
// Rules (API.md Agents): a body needs `spec` or `yaml` (else 422); PUT requires spec.name == :name;
// validate answers 200 {ok, issues?} and never 422 for spec problems; an unknown agent is 404
// E_AGENT_NOT_FOUND; every create, update and delete re-synchronises the mounted triggers and publishes
// on the `triggers` topic.
package main

import "net/http"

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
