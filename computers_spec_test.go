package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantInvalid checks that a request is refused as 422 E_SPEC_INVALID naming field (issue 25: user input
// is a 4xx envelope, never the engine's or the kernel's 500).
func (ts *testServer) wantInvalid(method, path string, body any, field string) {
	ts.t.Helper()
	r := ts.do(method, path, body)
	if r.status != 422 || r.errCode(ts.t) != codeSpecInvalid || !strings.Contains(string(r.body), field) {
		ts.t.Errorf("%s %s %v: got %d %s, want 422 E_SPEC_INVALID naming %s", method, path, body, r.status, r.body, field)
	}
}

// TestMountTargetsReserved: a mount may not cover what the machine needs from the kernel, agentd or its
// own image (issue 25: `/etc`, `/proc`, `/.agentd/...` gave runc's error text as a 500). Judged at spec
// validation, as the target resolves, for the create body and an agent spec alike; no engine involved.
func TestMountTargetsReserved(t *testing.T) {
	reserved := []string{"/etc", "/proc", "/.agentd", "/.agentd/chan", "/proc/sys", "/sys/fs/cgroup", "/dev/shm", "/dev",
		"/etc/hosts", "/etc/resolv.conf", "/usr", "/bin", "/lib64", "/work/../etc", "//proc/", "/tmp/../.agentd/x", "/", "/work", "/run/"}
	for _, target := range reserved {
		if err := checkMountTarget(target); err == nil {
			t.Errorf("target %q accepted", target)
		}
	}
	for _, target := range []string{"/data", "/work/data", "/etc/myapp", "/usr/local/share/data", "/opt/x", "/run/secrets", "/tmp/in", "/home/u/x"} {
		if err := checkMountTarget(target); err != nil {
			t.Errorf("target %q: %v, want accepted", target, err)
		}
	}
	allowed := t.TempDir()
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{allowed} })
	for i, target := range []string{"/etc", "/proc", "/.agentd/chan", "/work/../etc", "/sys/kernel"} {
		for _, prov := range []string{"docker", "podman", "sandbox"} {
			body := map[string]any{"provider": prov, "mounts": []any{map[string]any{"source": allowed, "target": target}}}
			e.wantInvalid("POST", "/v1/computers", body, "mounts.0.target")
		}
		spec := map[string]any{"name": fmt.Sprintf("mt%d", i), "computer": map[string]any{"mounts": []any{map[string]any{"source": allowed, "target": target}}}}
		e.wantInvalid("POST", "/v1/agents", map[string]any{"spec": spec}, "computer.mounts.0.target")
	}
	// The engine-args check (every create, whatever path the spec came by) applies the same rule.
	for _, target := range reserved {
		sp := ComputerSpec{Workdir: "/work", Mounts: []Mount{{Source: allowed, Target: target}}}
		if err := checkEngineArgs(sp, ""); err == nil || asAPIError(err).Code != codeSpecInvalid {
			t.Errorf("checkEngineArgs target %q: %v", target, err)
		}
	}
}

// TestMountTargetsOnEngine: on a real engine a reserved target is a 422 before anything starts (it was
// runc's text in a 500), and a target below /etc or /usr, which the rule keeps, really mounts.
func TestMountTargetsOnEngine(t *testing.T) {
	requireProvider(t, "docker")
	allowed := t.TempDir()
	os.Chmod(allowed, 0o755)
	if err := os.WriteFile(filepath.Join(allowed, "f"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{allowed} })
	for _, target := range []string{"/etc", "/proc", "/.agentd/chan"} {
		body := map[string]any{"provider": "docker", "mounts": []any{map[string]any{"source": allowed, "target": target}}}
		e.wantInvalid("POST", "/v1/computers", body, "mounts.0.target")
	}
	m := e.create(map[string]any{"provider": "docker", "mounts": []any{
		map[string]any{"source": allowed, "target": "/etc/myapp"}, map[string]any{"source": allowed, "target": "/usr/local/share/d"}}})
	defer e.do("DELETE", "/v1/computers/"+m.ID, nil)
	if out := e.sh(m.ID, "cat /etc/myapp/f /usr/local/share/d/f; id -un"); !strings.HasPrefix(out, "host\nhost\n") {
		t.Fatalf("mounts below /etc and /usr: %q", out)
	}
}

// TestNULInEnvIsInvalid: a NUL cannot reach a process's environment or argv (the kernel's strings end
// there; it was `fork/exec ... invalid argument` as a 500): every place that takes env or a value that
// reaches an argv refuses it as 422 naming the field.
func TestNULInEnvIsInvalid(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	for field, body := range map[string]map[string]any{
		"env.A":           {"provider": "local", "env": map[string]any{"A": "x\x00y"}},
		"setup":           {"provider": "local", "setup": "echo a\x00b"},
		"user":            {"provider": "local", "user": "u\x00"},
		"labels.k":        {"provider": "local", "labels": map[string]any{"k": "v\x00"}},
		"env.HOME":        {"provider": "docker", "env": map[string]any{"HOME": "\x00"}},
		"env.LD_X":        {"provider": "sandbox", "env": map[string]any{"LD_X": "a\x00"}},
		"mounts.0.target": {"provider": "docker", "mounts": []any{map[string]any{"source": "/srv", "target": "/data\x00"}}},
	} {
		e.wantInvalid("POST", "/v1/computers", body, field)
	}
	spec := map[string]any{"name": "nul", "computer": map[string]any{"env": map[string]any{"A": "x\x00"}}}
	e.wantInvalid("POST", "/v1/agents", map[string]any{"spec": spec}, "computer.env.A")
	m := e.create(map[string]any{"provider": "local"})
	e.wantInvalid("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "env", "env": map[string]any{"B": "1\x002"}}, "env.B")
	e.wantInvalid("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": []string{"echo", "a\x00"}}, "cmd")
}
