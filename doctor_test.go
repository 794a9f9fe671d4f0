package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestDoctor(t *testing.T) {
	ts := newTestServer(t)
	res := ts.do("GET", "/v1/doctor?force=true", nil)
	if res.status != 200 {
		t.Fatalf("%d %s", res.status, res.body)
	}
	m := res.json(t)
	if m["version"] != version || m["node"] != runtime.Version() || m["platform"] != runtime.GOOS+"/"+runtime.GOARCH ||
		m["agentHome"] != ts.s.cfg.Home || m["firstRun"] != true {
		t.Fatalf("report %s", res.body)
	}
	for _, k := range []string{"providers", "models", "warnings"} {
		if _, ok := m[k].([]any); !ok {
			t.Fatalf("%s is not a list: %s", k, res.body)
		}
	}
	sel, ok := m["selection"].(map[string]any)
	if !ok {
		t.Fatalf("selection: %s", res.body)
	}
	for _, k := range []string{"provider", "providerReason", "isolated", "model", "modelReason"} {
		if _, ok := sel[k]; !ok {
			t.Fatalf("selection lacks %s: %s", k, res.body)
		}
	}
	if !strings.Contains(string(res.body), "no AGENT_TOKEN is set") {
		t.Fatalf("no token-less warning: %s", res.body)
	}

	withToken := newTestServer(t, func(c *testSetup) { c.Token = "a-long-enough-token" })
	res = withToken.do("GET", "/v1/doctor", nil, "Authorization", "Bearer a-long-enough-token")
	if res.status != 200 || strings.Contains(string(res.body), "AGENT_TOKEN") {
		t.Fatalf("token warning with a token set: %s", res.body)
	}
}

func TestDoctorDiskWarning(t *testing.T) {
	cases := []struct {
		name         string
		avail, total uint64
		err          error
		want         string
	}{
		{"plenty", 50 << 30, 100 << 30, nil, ""},
		{"few bytes left", 100 << 20, 100 << 30, nil, "full disk: 100 MB free"},
		{"small percentage", 1 << 30, 1000 << 30, nil, "full disk"},
		{"unknown platform", 0, 0, nil, ""},
		{"unreadable", 0, 0, errors.New("boom"), "cannot read the free space"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := diskWarning("/data", func(string) (uint64, uint64, error) { return tc.avail, tc.total, tc.err })
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("warning %q, want %q", got, tc.want)
			}
		})
	}
	ts := newTestServer(t)
	ts.s.diskFree = func(string) (uint64, uint64, error) { return 1 << 20, 1 << 40, nil }
	if res := ts.do("GET", "/v1/doctor", nil); !strings.Contains(string(res.body), "full disk") {
		t.Fatalf("doctor did not warn: %s", res.body)
	}
	// The real disk answers.
	if _, _, err := diskFree(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestDoctorAvailabilityIsProven: a provider is available only when a trial machine started on it and ran
// a command (computers_proof.go), and `auto` picks only such a one. The real binary serves, with each
// provider broken the way users meet it: docker's daemon not answering (DOCKER_HOST), podman's engine
// failing (a podman that cannot connect), bwrap missing from PATH, the cluster gone (a kubeconfig that is
// not there); and then a bwrap whose probe passes but whose machine cannot start (as the README's cgo build
// was as root, issue 24), which the doctor called available and `auto` picked before.
func TestDoctorAvailabilityIsProven(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the sandbox's half needs Linux")
	}
	bin := cliBinary(t)
	broken := func(t *testing.T, bwrap string) *testServer {
		dir := t.TempDir()
		link := func(name string) {
			if p, err := exec.LookPath(name); err == nil {
				os.Symlink(p, filepath.Join(dir, name))
			}
		}
		for _, name := range []string{"sh", "env", "docker", "kubectl"} { // not bwrap
			link(name)
		}
		os.WriteFile(filepath.Join(dir, "podman"), []byte("#!/bin/sh\necho 'Error: unable to connect to Podman: simulated engine stop' >&2\nexit 125\n"), 0o755)
		if bwrap != "" {
			os.WriteFile(filepath.Join(dir, "bwrap"), []byte(bwrap), 0o755)
		}
		home := t.TempDir()
		cfg := fmt.Sprintf("kubernetes: {kubeconfig: %q}\n", filepath.Join(home, "no-such-kubeconfig"))
		e, _ := serveBinary(t, bin, home, cfg, "PATH="+dir, "DOCKER_HOST=unix://"+filepath.Join(home, "no-docker.sock"))
		return e
	}
	// doctor polls until no provider is being checked; the first request only asked for the trials.
	doctor := func(t *testing.T, e *testServer) (map[string]doctorProvider, DoctorReport) {
		var rep DoctorReport
		eventually(t, "every provider's trial to end", func() bool {
			rep = DoctorReport{}
			e.call("GET", "/v1/doctor", nil, 200, &rep)
			return !strings.Contains(fmt.Sprint(rep.Providers), "being checked") && rep.Selection.Provider != ""
		})
		by := map[string]doctorProvider{}
		for _, p := range rep.Providers {
			by[p.Name] = p
			if !p.Available && (p.Reason == "" || p.Hint == "") || p.Available && p.Proof == "" {
				t.Errorf("%s: available=%v without its reason, fix or proof: %+v", p.Name, p.Available, p)
			}
		}
		return by, rep
	}
	t.Run("engines-stopped-bwrap-missing-cluster-gone", func(t *testing.T) {
		e := broken(t, "")
		by, rep := doctor(t, e)
		for name, want := range map[string]string{"docker": "not reachable", "podman": "simulated engine stop",
			"sandbox": "bubblewrap (bwrap) is not installed", "kubernetes": ""} {
			if p := by[name]; p.Available || !strings.Contains(p.Reason, want) {
				t.Errorf("%s: %+v, want unavailable saying %q", name, p, want)
			}
		}
		if !by["local"].Available || rep.Selection.Provider != "local" {
			t.Errorf("local %+v, selection %+v", by["local"], rep.Selection)
		}
	})
	t.Run("sandbox-that-cannot-start", func(t *testing.T) {
		real, err := exec.LookPath("bwrap")
		if err != nil {
			t.Skip("no bwrap here")
		}
		// Everything bwrap is asked by the probe works; a machine (its helper) does not.
		e := broken(t, "#!/bin/sh\ncase \"$*\" in *machine-helper*) echo 'bwrap: simulated: the machine cannot start' >&2; exit 1;; esac\nexec "+real+" \"$@\"\n")
		by, rep := doctor(t, e)
		if p := by["sandbox"]; p.Available || !strings.Contains(p.Reason, "trial machine could not start") {
			t.Errorf("sandbox: %+v, want unavailable with its trial's failure", p)
		}
		if rep.Selection.Provider != "local" {
			t.Errorf("selection %+v, want local", rep.Selection)
		}
		var m ComputerInfo
		e.call("POST", "/v1/computers", map[string]any{}, 201, &m) // auto
		if m.Provider != "local" {
			t.Errorf("auto picked %s, whose trial failed", m.Provider)
		}
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		msg := e.wantError("POST", "/v1/computers", map[string]any{"provider": "sandbox"}, 503, codeProviderUnavailable)["message"]
		if !strings.Contains(fmt.Sprint(msg), "trial machine could not start") {
			t.Errorf("a sandbox create: %v", msg)
		}
	})
}

// endingTrial lists a trial machine that ends right after the listing, before reconcile judges what it
// listed, as a trial started by `serve` does while the startup reconcile runs.
type endingTrial struct {
	*localProvider
	id string
}

func (p *endingTrial) owned(ctx context.Context) (map[string]bool, error) {
	p.c.proof.mu.Lock()
	delete(p.c.proof.trials, p.id) // the trial destroyed its machine meanwhile
	p.c.proof.mu.Unlock()
	return map[string]bool{p.id: true}, nil
}

// TestReconcileLeavesEndedTrialAlone: a trial machine (computers_proof.go) listed by reconcile and
// destroyed by its trial before reconcile looked at it was taken for an orphan: reaped with a
// computer_reaped event for a machine that never had a record, and a doctor warning meanwhile.
func TestReconcileLeavesEndedTrialAlone(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	quiesce(c)
	var p *endingTrial
	for _, lp := range c.providers {
		if l, ok := lp.(*localProvider); ok {
			p = &endingTrial{localProvider: l, id: newID("cmp")}
		}
	}
	c.proof.mu.Lock()
	c.proof.trials[p.id] = true
	c.proof.mu.Unlock()
	c.providers = []provider{p}
	c.reconcile(context.Background(), map[string]bool{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.orphans) != 0 {
		t.Fatalf("orphans %v: the trial machine %s was taken for one", c.orphans, p.id)
	}
}

// TestDoctorHostOffers: the doctor says what each host OS offers (issue 29): on Windows docker, podman
// and ssh without multiplexing, local refused with the reason; on macOS docker, podman, local and ssh;
// the sandbox only on Linux. The report carries this host's, and the local provider's own refusal on this
// build agrees with the table.
func TestDoctorHostOffers(t *testing.T) {
	offered := func(h doctorHost) (yes, no []string) {
		for _, o := range h.Offers {
			if o.How == "" {
				t.Errorf("%s/%s: no how", h.OS, o.Provider)
			}
			if o.Offered {
				yes = append(yes, o.Provider)
			} else {
				no = append(no, o.Provider)
			}
		}
		return yes, no
	}
	how := func(h doctorHost, p string) string {
		for _, o := range h.Offers {
			if o.Provider == p {
				return o.How
			}
		}
		return ""
	}
	for goos, want := range map[string]string{
		"windows": "docker podman ssh kubernetes fly | sandbox local",
		"darwin":  "docker podman local ssh kubernetes fly | sandbox",
		"linux":   "docker podman sandbox local ssh kubernetes fly | ",
	} {
		h := hostOffers(goos)
		yes, no := offered(h)
		if got := strings.Join(yes, " ") + " | " + strings.Join(no, " "); got != want || h.OS != goos {
			t.Errorf("%s offers %q, want %q", goos, got, want)
		}
	}
	win := hostOffers("windows")
	if !strings.Contains(how(win, "ssh"), "without multiplexing") || !strings.Contains(how(win, "local"), "POSIX shell") ||
		!strings.Contains(how(win, "docker"), "per-call path") {
		t.Errorf("windows: %+v", win)
	}
	if strings.Contains(how(hostOffers("darwin"), "ssh"), "without multiplexing") || !strings.Contains(how(hostOffers("linux"), "docker"), "exec channel") {
		t.Errorf("darwin/linux: %+v %+v", hostOffers("darwin"), hostOffers("linux"))
	}
	// The ssh provider's default follows the host: no ControlMaster on Windows unless the config says so.
	on := true
	if (sshConfig{}).multiplex("windows") || !(sshConfig{}).multiplex("darwin") || !(sshConfig{Multiplex: &on}).multiplex("windows") {
		t.Error("ssh.multiplex's default does not follow the host")
	}
	// This build: the local provider's refusal (platform_*.go) is the table's.
	reason, _ := localHostRefusal()
	for _, o := range hostOffers(runtime.GOOS).Offers {
		if o.Provider == "local" && o.Offered != (reason == "") {
			t.Errorf("local on %s: table %v, probe refusal %q", runtime.GOOS, o.Offered, reason)
		}
	}
	ts := newTestServer(t)
	var rep DoctorReport
	ts.call("GET", "/v1/doctor", nil, 200, &rep)
	if rep.Host.OS != runtime.GOOS || len(rep.Host.Offers) != len(hostOffers(runtime.GOOS).Offers) {
		t.Errorf("the report's host: %+v", rep.Host)
	}
}
