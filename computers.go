// computers.go — the computer service: providers (docker, podman, local), lifecycle, records, reaper,
// and the /v1/computers endpoints.
//
// Entry points used elsewhere (the run loop depends on these exact signatures): EnsureForAgent, Get,
// Exec, ReadFile, WriteFile, ListDir, DeletePath, ExposePort.
package main

import (
	"context"
	"net/http"
)

// ComputerInfo is the API's view of a machine (DESIGN §4).
type ComputerInfo struct {
	ID            string                 `json:"id"`
	Name          string                 `json:"name"`
	Provider      string                 `json:"provider"`
	State         string                 `json:"state"` // creating, running, stopped, destroyed, error
	Isolated      bool                   `json:"isolated"`
	IsolationKind string                 `json:"isolationKind"` // kernel | guardrails
	Image         string                 `json:"image"`
	Workdir       string                 `json:"workdir"`
	CreatedAt     string                 `json:"createdAt"`
	LastUsedAt    string                 `json:"lastUsedAt"`
	ExpiresAt     string                 `json:"expiresAt,omitempty"`
	Spec          ComputerSpec           `json:"spec"`
	Ports         map[string]PortBinding `json:"ports"`
	Error         string                 `json:"error,omitempty"`
}

// PortBinding is a guest port reachable from the host.
type PortBinding struct {
	HostPort  int    `json:"hostPort"`
	URL       string `json:"url"`
	PublicURL string `json:"publicUrl,omitempty"`
	Reachable bool   `json:"reachable"`
}

// ExecRequest is the exec body. Cmd is a string (run under /bin/sh -c) or an argv array (run directly).
type ExecRequest struct {
	Cmd            execCommand       `json:"cmd"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSec     int               `json:"timeoutSec,omitempty"` // 1-3600, default 120
	Stdin          *string           `json:"stdin,omitempty"`
	TTY            bool              `json:"tty,omitempty"`
	User           string            `json:"user,omitempty"`
	MaxOutputBytes int               `json:"maxOutputBytes,omitempty"` // 1-16 MiB, default 256 KiB per stream

	// Policy is the caller's allow/deny patterns; the built-in deny list always applies. Not on the wire.
	Policy commandPolicy `json:"-"`
}

// execCommand holds either a shell string or an argv.
type execCommand struct {
	Shell string
	Argv  []string
}

// ExecResult is the outcome of one exec. A non-zero exit is still a successful exec.
type ExecResult struct {
	ExitCode   int    `json:"exitCode"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"durationMs"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timedOut"`
}

// DirEntry is one element of a directory listing; directories first.
type DirEntry struct {
	Name       string `json:"name"`
	Path       string `json:"path"`
	Type       string `json:"type"` // file, dir, symlink, other
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt"`
	Mode       string `json:"mode"`
}

// computerService owns machines and the reaper goroutine.
type computerService struct{ s *server }

func newComputerService(s *server) (*computerService, error) { return &computerService{s: s}, nil }

// Close stops the reaper and waits; machines keep running and are adopted at the next start.
func (c *computerService) Close() {}

var errComputersNotLanded = errorf(codeNotImplemented, "computers have not landed yet")

// EnsureForAgent returns the running computer named after the agent, creating it from spec if needed.
// Concurrent runs of one agent share it.
func (c *computerService) EnsureForAgent(ctx context.Context, agent string, spec ComputerSpec) (*ComputerInfo, error) {
	return nil, errComputersNotLanded
}

// Get resolves an id, or a name held by exactly one computer.
func (c *computerService) Get(ctx context.Context, idOrName string) (*ComputerInfo, error) {
	return nil, errComputersNotLanded
}

// Exec runs one command after the command policy allowed it; onOutput (may be nil) receives output
// chunks as they arrive, stream being "stdout" or "stderr". Cancelling ctx kills the process tree.
func (c *computerService) Exec(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (*ExecResult, error) {
	return nil, errComputersNotLanded
}

// ReadFile, WriteFile, ListDir and DeletePath go through the path jail of DESIGN §4.
func (c *computerService) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	return nil, errComputersNotLanded
}
func (c *computerService) WriteFile(ctx context.Context, id, path string, data []byte) error {
	return errComputersNotLanded
}
func (c *computerService) ListDir(ctx context.Context, id, path string) ([]DirEntry, error) {
	return nil, errComputersNotLanded
}
func (c *computerService) DeletePath(ctx context.Context, id, path string, recursive bool) error {
	return errComputersNotLanded
}

// ExposePort binds a guest port to the host (idempotent per port).
func (c *computerService) ExposePort(ctx context.Context, id string, port int) (*PortBinding, error) {
	return nil, errComputersNotLanded
}

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

// doctor reports the computer providers, the one `auto` would select (with its reason and isolation),
// and warnings (only a non-isolated provider available, orphaned containers).
func (c *computerService) doctor(ctx context.Context) (providers []doctorProvider, sel doctorSelection, warnings []string) {
	return []doctorProvider{}, doctorSelection{}, nil
}
