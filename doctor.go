// doctor.go — the capability report: GET /v1/doctor (and later `agentd doctor --json`), and the
// embedded dashboard placeholder served at GET / with single-page-app fallback.
package main

import "net/http"

func (s *server) handleDoctor(w http.ResponseWriter, r *http.Request)    { notImplemented(w) }
func (s *server) handleDashboard(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
