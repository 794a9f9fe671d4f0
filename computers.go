// computers.go — the computer service: providers (docker, podman, local), lifecycle, records, reaper,
// and the /v1/computers endpoints.
package main

import "net/http"

// computerService owns machines and the reaper goroutine.
type computerService struct{ s *server }

func newComputerService(s *server) (*computerService, error) { return &computerService{s: s}, nil }

// Close stops the reaper and waits; machines keep running and are adopted at the next start.
func (c *computerService) Close() {}

func (s *server) handleListComputers(w http.ResponseWriter, r *http.Request)  { notImplemented(w) }
func (s *server) handleCreateComputer(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
func (s *server) handleGetComputer(w http.ResponseWriter, r *http.Request)    { notImplemented(w) }
func (s *server) handleDeleteComputer(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
func (s *server) handleStopComputer(w http.ResponseWriter, r *http.Request)   { notImplemented(w) }
func (s *server) handleStartComputer(w http.ResponseWriter, r *http.Request)  { notImplemented(w) }
func (s *server) handleExec(w http.ResponseWriter, r *http.Request)           { notImplemented(w) }
func (s *server) handleExecStream(w http.ResponseWriter, r *http.Request)     { notImplemented(w) }
func (s *server) handleListDir(w http.ResponseWriter, r *http.Request)        { notImplemented(w) }
func (s *server) handleReadFile(w http.ResponseWriter, r *http.Request)       { notImplemented(w) }
func (s *server) handleWriteFile(w http.ResponseWriter, r *http.Request)      { notImplemented(w) }
func (s *server) handleDeleteFile(w http.ResponseWriter, r *http.Request)     { notImplemented(w) }
func (s *server) handleUpload(w http.ResponseWriter, r *http.Request)         { notImplemented(w) }
func (s *server) handleDownload(w http.ResponseWriter, r *http.Request)       { notImplemented(w) }
func (s *server) handleExposePort(w http.ResponseWriter, r *http.Request)     { notImplemented(w) }
func (s *server) handleTerminal(w http.ResponseWriter, r *http.Request)       { notImplemented(w) }
