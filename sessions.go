// sessions.go — transcripts: discovery, import and distillation into agent specs.
package main

import "net/http"

func (s *server) handleDiscoverSessions(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
func (s *server) handleImportSession(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
func (s *server) handleDistill(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
func (s *server) handleDistillStream(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
