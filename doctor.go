// doctor.go — the capability report: GET /v1/doctor (and later `agentd doctor --json`), and the
// embedded dashboard placeholder served at GET / with single-page-app fallback.
package main

import "net/http"

func (s *server) handleDoctor(w http.ResponseWriter, r *http.Request)    { notImplemented(w) }
func (s *server) handleDashboard(w http.ResponseWriter, r *http.Request) { notImplemented(w) }

// doctorProvider is one computer provider in the doctor report.
type doctorProvider struct {
	Name          string `json:"name"`
	Description   string `json:"description"`
	Priority      int    `json:"priority"`
	Available     bool   `json:"available"`
	Isolated      bool   `json:"isolated"`
	IsolationKind string `json:"isolationKind"`
	Version       string `json:"version,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Hint          string `json:"hint,omitempty"`
}

// doctorModelProvider is one model provider in the doctor report.
type doctorModelProvider struct {
	ID          string   `json:"id"`
	DisplayName string   `json:"displayName"`
	Priority    int      `json:"priority"`
	Available   bool     `json:"available"`
	EnvKey      string   `json:"envKey"`
	Models      []string `json:"models"` // at most 12, only from providers that answered
	Reason      string   `json:"reason,omitempty"`
	Hint        string   `json:"hint,omitempty"`
}

// doctorSelection is what the server would pick, with the reason for each choice.
type doctorSelection struct {
	Provider       string `json:"provider"`
	ProviderReason string `json:"providerReason"`
	Isolated       bool   `json:"isolated"`
	Model          string `json:"model"`
	ModelReason    string `json:"modelReason"`
}
