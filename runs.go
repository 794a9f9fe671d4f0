// runs.go — the run service: the agent loop, run records, cancel, and the run/approval endpoints.
package main

import "net/http"

// runService owns in-flight runs.
type runService struct{ s *server }

func newRunService(s *server) *runService { return &runService{s: s} }

// Close aborts runs in flight and waits for them to record their end.
func (rs *runService) Close() {}

// activeRuns lists runs in flight for the events hello frame: [{runId, agent, startedAt}].
func (s *server) activeRuns() []map[string]any { return []map[string]any{} }

func (s *server) handleRun(w http.ResponseWriter, r *http.Request)            { notImplemented(w) }
func (s *server) handleRunStream(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handleListRuns(w http.ResponseWriter, r *http.Request)       { notImplemented(w) }
func (s *server) handleGetRun(w http.ResponseWriter, r *http.Request)         { notImplemented(w) }
func (s *server) handleDeleteRun(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handleCancelRun(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handleListApprovals(w http.ResponseWriter, r *http.Request)  { notImplemented(w) }
func (s *server) handleAnswerApproval(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
