// computers_percall.go — the one way a command runs in a machine, and the one fallback (issue 27).
//
// Entry points: computerService.machineCommand (docker, podman and kubernetes: the exec channel, else
// the fallback), perCaller (what a provider gives the fallback: one host process per call), and the
// fallback's parts: perCallWrapper, killTree, killLeftovers; engineFS (computers_engine.go) runs its
// file scripts through the same perCallCmd.
//
// Rules: a command goes over the machine's warm exec channel (computers_channel.go) whenever it is up.
// The fallback, the same on every engine, is one host process per call (`docker exec`, `podman exec`,
// `kubectl exec`) running the command under a small /bin/sh wrapper that records its process group in
// /tmp/.agentd-exec-<token>.pid and announces the command's end with its exit code on both streams, so a
// second call can kill the whole tree and a background child cannot hold the exec open. It serves what
// the channel does not carry: a machine whose helper cannot run (execChannel: false, a cgo agentd in a
// musl image, a host whose binary is not Linux, a machine made without the helper mount), an exec as
// another user, and a tty.
package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// perCaller is a provider with the per-call fallback: docker, podman (computers_engine.go) and
// kubernetes (computers_kubernetes.go).
type perCaller interface {
	channelHost
	// perCallCmd is one host process running argv in m as p.user (the machine's when ""), in p.cwd, with
	// p.env added; its stdin stays open when p has stdin or a terminal.
	perCallCmd(ctx context.Context, m *ComputerInfo, p *procSpec, argv []string) *exec.Cmd
}

// machineCommand runs p over the machine's exec channel when it can, else through the fallback.
func (c *computerService) machineCommand(ctx context.Context, host perCaller, m *ComputerInfo, p *procSpec) *procHandle {
	if !p.tty && (p.user == "" || p.user == machineUser(m)) {
		if ch := c.channel(ctx, host, m); ch != nil {
			return &procHandle{remote: ch, req: chanStart{Argv: p.argv, Cwd: p.cwd, Env: p.env, Token: p.token}}
		}
	} else if m.Spec.Network.Mode == "egress" {
		c.channel(ctx, host, m) // an exec on the fallback (another user, a tty) also finds the egress proxy there
	}
	argv := p.argv
	if p.tty && p.term == nil && host.meta().name == "kubernetes" {
		// kubectl gives a TTY only when its own stdin is a terminal: util-linux script makes one inside.
		argv = []string{"script", "-qefc", shellJoin(argv), "/dev/null"}
	}
	cmd := host.perCallCmd(ctx, m, p, append([]string{"/bin/sh", "-c", perCallWrapper(p), "agentd"}, argv...))
	cmd.Cancel = func() error {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		killTree(kctx, host, m, p)
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = execPipeGrace
	return &procHandle{cmd: cmd, endMarker: true}
}

func perCallPidFile(p *procSpec) string { return "/tmp/.agentd-exec-" + p.token + ".pid" }

// perCallWrapper records the process group (the exec is a session leader) and announces the end of the
// command with its exit code on both streams.
func perCallWrapper(p *procSpec) string {
	mk := strings.ReplaceAll(markerPrefix(p.token), "\x1e", `\036`)
	return p.sizeFirst() + `echo $$ > ` + perCallPidFile(p) + ` 2>/dev/null; "$@"; rc=$?; rm -f ` + perCallPidFile(p) +
		`; printf '` + mk + `%03d\036' "$rc"; printf '` + mk + `%03d\036' "$rc" >&2; exit $rc`
}

// killTree kills the exec's process group inside the machine, as the exec's own user (root there has
// no CAP_KILL). It waits briefly for the pid file in case the kill races the start.
func killTree(ctx context.Context, host perCaller, m *ComputerInfo, p *procSpec) {
	f := perCallPidFile(p)
	script := `i=0; while [ ! -s ` + f + ` ] && [ $i -lt 20 ]; do sleep 0.05; i=$((i+1)); done; ` +
		`p=$(cat ` + f + ` 2>/dev/null) && [ -n "$p" ] && { kill -9 -$p 2>/dev/null || kill -9 $p; }; rm -f ` + f
	host.perCallCmd(ctx, m, &procSpec{user: p.user, cwd: "/"}, []string{"/bin/sh", "-c", script}).Run()
}

// killLeftovers kills the process group of every exec whose pid file is still there: the wrapper (and
// the channel's helper) removes it when the command ends, so what is left belongs to a server that died.
func (c *computerService) killLeftovers(ctx context.Context, host perCaller, m *ComputerInfo) int {
	script := `n=0; for f in /tmp/.agentd-exec-*.pid /tmp/.agentd-chan-*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); rm -f "$f"; ` +
		`[ -n "$p" ] && { kill -9 -"$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; } && n=$((n+1)); done; echo $n`
	out, err := host.perCallCmd(ctx, m, &procSpec{cwd: "/"}, []string{"/bin/sh", "-c", script}).Output()
	if err != nil {
		c.log.Warn("computers: killing leftover processes", "computer", m.ID, "err", err)
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}
