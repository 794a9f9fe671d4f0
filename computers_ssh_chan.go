// computers_ssh_chan.go — the exec channel on the ssh provider (issue 29): agentd's own binary, copied once
// to the host, runs there as `machine-helper`, one per machine, over one long ssh session (multiplexed
// over the machine's ControlMaster, or a connection of its own without multiplexing), and carries the
// machine's execs as frames instead of one ssh session each.
//
// Entry points: sshProvider.channelCommand (an exec over the channel; nil: the per-call path),
// sshProvider.helperCmd (channelHost: the helper's ssh process), sshProvider.remoteHelper (the copy).
//
// Rules: the copy is content-addressed (~/.agentd/bin/agentd-<sha256>, mode 0700, written to a temporary
// name and renamed), made only when the host's `uname -sm` is Linux on this binary's architecture, and
// used only once it ran there (`version`: a cgo build on a host with another libc cannot); otherwise, and
// whenever the channel is off or down, an exec takes the per-call path of computers_ssh.go, unchanged.
// The helper starts in the machine's directory under `env -i` with only the machine's environment (as a
// per-call exec does, AGENTD_COMPUTER_ID included, so the reaper's kill finds it and its children), and
// records its process groups in the machine's own directory (--pid-files), never the host's shared /tmp:
// a new helper kills only its own machine's leftovers. The cwd is mapped to the host on the host side,
// then its links are followed by the helper (readlink -m) and the result must still be inside the
// machine's work or tmp directory. A terminal takes the per-call path (-tt). File operations stay on the
// per-call path (computers_ssh_fs.go: mapped and jailed there); ports stay on the master's -L.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strings"
)

// unameMachine is `uname -m` for each architecture the helper can be built for.
var unameMachine = map[string][]string{"amd64": {"x86_64"}, "arm64": {"aarch64", "arm64"}, "386": {"i386", "i686"},
	"arm": {"armv7l", "armv6l"}, "riscv64": {"riscv64"}, "ppc64le": {"ppc64le"}, "s390x": {"s390x"}}

// remoteHelper is the helper's path on the host, copied there on first use; "" when the host cannot run
// it (said once in the log) or the copy failed this time (tried again on the next exec).
func (s *sshProvider) remoteHelper(ctx context.Context, m *ComputerInfo) string {
	if s.c.helper == "" {
		return ""
	}
	s.helperMu.Lock()
	defer s.helperMu.Unlock()
	if s.helperBin != "" || s.helperOff != "" {
		return s.helperBin
	}
	off := func(why string) string {
		s.helperOff = why
		s.c.log.Info("computers: the ssh host cannot run the exec channel's helper; execs take one ssh session each", "host", s.target(), "why", why)
		return ""
	}
	f, err := os.Open(s.c.helper)
	if err != nil {
		return off(err.Error())
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return off(err.Error())
	}
	home, err := s.remoteHome(ctx, m)
	if err != nil {
		return ""
	}
	bin := path.Join(home, ".agentd/bin/agentd-"+hex.EncodeToString(sum.Sum(nil)))
	var out bytes.Buffer
	if err := s.call(ctx, m, nil, &out, `uname -sm; [ -x "$1" ] && echo present; true`, bin); err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	sys, mach, _ := strings.Cut(lines[0], " ")
	if sys != "Linux" || !strings.Contains(" "+strings.Join(unameMachine[runtime.GOARCH], " ")+" ", " "+mach+" ") {
		return off(fmt.Sprintf("the host is %q and agentd is built for linux/%s", lines[0], runtime.GOARCH))
	}
	if len(lines) < 2 || lines[1] != "present" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return off(err.Error())
		}
		err := s.call(ctx, m, f, nil, `umask 077 && mkdir -p "${1%/*}" && cat > "$1.$$" && chmod 700 "$1.$$" && mv -f "$1.$$" "$1"`, bin)
		if err != nil {
			s.c.log.Warn("computers: copying the exec channel's helper to the ssh host", "host", s.target(), "err", err)
			return ""
		}
	}
	out.Reset()
	if err := s.call(ctx, m, nil, &out, `"$1" version`, bin); err != nil || !strings.HasPrefix(out.String(), "agentd ") {
		var se *sshError
		if err != nil && !(errors.As(err, &se) && se.connFailed()) {
			return off("agentd does not run there (a cgo build needs a compatible glibc; build with CGO_ENABLED=0): " + firstLine(err.Error()))
		}
		return ""
	}
	s.helperBin = bin
	return bin
}

// helperCmd is the helper's ssh process: into the machine's directory, then, with only the machine's
// environment, the copied binary with the machine's own pid files.
// A channel opened by another caller (the browser's loopback) copies the helper first; a host that
// cannot run it gives a command that fails to start, saying why.
func (s *sshProvider) helperCmd(ctx context.Context, m *ComputerInfo) *exec.Cmd {
	bin := s.remoteHelper(ctx, m)
	if bin == "" {
		why := s.channelOff()
		if why == "" {
			why = "it could not be copied there (see the log)"
		}
		cmd := exec.CommandContext(ctx, "ssh")
		cmd.Err = errors.New("the exec channel's helper cannot run on the ssh host: " + why)
		return cmd
	}
	s.mu.Lock()
	dir := path.Join(s.home, s.rel(m))
	s.mu.Unlock()
	remote := `cd -- ` + shellQuote(dir+"/work") + ` && exec env -i ` + strings.Join(sshEnv(dir, m, nil, false), " ") + " " +
		shellQuote(bin) + " machine-helper --pid-files " + shellQuote(dir+"/.chan-")
	return s.cli(ctx, muxOpts(s.liveSock(m.ID)), []string{"-T"}, remote)
}

// channelCommand runs p over the machine's exec channel: nil (and no error) when it cannot, and the
// per-call path runs it. cwd is p.cwd mapped into dir.
func (s *sshProvider) channelCommand(ctx context.Context, m *ComputerInfo, dir, cwd string, p *procSpec) (*procHandle, error) {
	if p.tty || p.term != nil || s.remoteHelper(ctx, m) == "" {
		return nil, nil
	}
	if s.mux {
		if _, err := s.connect(ctx, m); err != nil {
			return nil, err
		}
	}
	ch := s.c.channel(ctx, s, m)
	if ch == nil {
		return nil, nil
	}
	var out, stderr bytes.Buffer
	proc, err := ch.start(chanStart{Op: "resolve", Argv: []string{cwd}}, nil, &out, &limitedBuffer{b: &stderr, max: 4096})
	if err != nil {
		return nil, nil
	}
	if x, err := proc.wait(ctx); err != nil || x.Code != 0 || x.Error != "" {
		return nil, nil
	}
	real := strings.TrimSuffix(out.String(), "\n")
	if _, ok := hostGuest(dir, real); !ok {
		return nil, errorf(codeFSDenied, "cwd %s resolves outside the workspace through a symlink", p.cwd).withHint("use a cwd under /work or /tmp")
	}
	env := maps.Clone(p.env)
	if env == nil {
		env = map[string]string{}
	}
	env["AGENTD_COMPUTER_ID"] = m.ID // the helper's own; the request's cannot override it
	return &procHandle{remote: ch, req: chanStart{Argv: p.argv, Cwd: real, Env: env, Token: p.token}}, nil
}

// channelOff says why the host cannot run the helper ("": it can, or it is not known yet).
func (s *sshProvider) channelOff() string {
	s.helperMu.Lock()
	defer s.helperMu.Unlock()
	return s.helperOff
}
