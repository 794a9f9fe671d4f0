// cli_runfile.go — `agentd run FILE.yaml [INPUT]`: one run of a spec file with no server to talk to, for
// scripts and CI.
//
// Entry points: isSpecFile (run's NAME is a file: a path with a .yaml, .yml or .json name that exists),
// (*cli).runInProcess (called by runAgent before it sends anything).
// Rules: the server is this process's own — newServer on a temporary data directory, with the user's
// config.yaml copied in (the same images, aliases and model), the same providers from the environment
// and the same router — listening on a loopback port with a random bearer token, no triggers or cron.
// The spec goes through the same create call as `apply`, the run through the same streaming, approvals,
// printing and exit codes as `agentd run NAME`. When the run ends (or Ctrl-C), every machine it made is
// destroyed, the server closes and the directory is removed: nothing is left behind.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// isSpecFile: run's first argument names a spec file rather than a stored agent (agent names have no
// dot or slash, so there is no ambiguity).
func isSpecFile(arg string) bool {
	switch strings.ToLower(filepath.Ext(arg)) {
	case ".yaml", ".yml", ".json":
	default:
		return false
	}
	fi, err := os.Stat(arg)
	return err == nil && fi.Mode().IsRegular()
}

// runInProcess starts a private server, points c at it and creates the file's agent there; it returns
// the agent's name and the function that tears everything down.
func (c *cli) runInProcess(file string) (name string, stop func(), err error) {
	home, err := os.MkdirTemp("", "agentd-run-")
	if err != nil {
		return "", nil, err
	}
	cleanup := []func(){func() { os.RemoveAll(home) }}
	teardown := func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	defer func() {
		if err != nil {
			teardown()
		}
	}()
	userHome := firstNonEmpty(c.getenv("AGENT_HOME"), filepath.Join(firstNonEmpty(c.getenv("HOME"), os.TempDir()), ".agentd"))
	if b, rerr := os.ReadFile(filepath.Join(userHome, "config.yaml")); rerr == nil {
		if err = os.WriteFile(filepath.Join(home, "config.yaml"), b, 0o600); err != nil {
			return "", nil, err
		}
	}
	token := randomChars(40) // 200 random bits
	env := func(k string) string {
		switch k {
		case "AGENT_HOME", "AGENT_HOST", "AGENT_PORT", "AGENT_URL":
			return ""
		case "AGENT_TOKEN":
			return token
		}
		return c.getenv(k)
	}
	cfg, err := loadConfig([]string{"--home", home, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"}, env, c.stderr)
	if err != nil {
		return "", nil, err
	}
	cfg.noTriggers = true
	cfg.Triggers = new(bool)
	s, err := newServer(cfg, newLogger(cfg, c.stderr), time.Now)
	if err != nil {
		return "", nil, err
	}
	cleanup = append(cleanup, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		recs, _ := s.store.ListComputers(ctx)
		for _, m := range recs { // the run's machines go with it
			if derr := s.computers.destroy(ctx, m.ID, "agentd run ended"); derr != nil {
				s.log.Warn("destroying a run's machine", "computer", m.ID, "err", derr)
			}
		}
		s.computers.drainPool(ctx)
		s.Close(ctx)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return s.streamCtx },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	served := make(chan struct{})
	go func() { hs.Serve(ln); close(served) }()
	cleanup = append(cleanup, func() {
		s.cancelStream()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			hs.Close()
		}
		<-served
	})
	c.base, c.token = "http://"+ln.Addr().String(), cfg.Token
	sum, _, err := c.applyOne(file)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Details["issues"] != nil {
			for _, line := range ae.Details["issues"].([]any) {
				fmt.Fprintf(c.stderr, "%s: %v\n", file, line)
			}
			return "", nil, exitCode{code: 1, msg: file + " is not a valid agent spec"}
		}
		return "", nil, fmt.Errorf("%s: %w", file, err)
	}
	return sum.Name, teardown, nil
}
