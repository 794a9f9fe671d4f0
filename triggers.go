// triggers.go — http, webhook and cron triggers: the dispatch tables rebuilt on every agent change.
package main

import "net/http"

// triggerService owns the dispatch tables and the cron scheduler goroutine.
type triggerService struct{ s *server }

func newTriggerService(s *server) *triggerService { return &triggerService{s: s} }

// Close stops the cron scheduler and waits for it.
func (t *triggerService) Close() {}

// syncTriggers rebuilds the dispatch tables from the stored agents. Called at start and after every
// agent create, update and delete.
func (s *server) syncTriggers() {}

func (s *server) handleHTTPTrigger(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
func (s *server) handleWebhookTrigger(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
func (s *server) handleListTriggers(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented()
}
