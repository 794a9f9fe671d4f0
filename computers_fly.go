// computers_fly.go — the `fly` provider: machines as Fly.io Machines (Firecracker microVMs) through the
// Fly Machines REST API (https://api.machines.dev/v1), with the bearer token FLY_API_TOKEN.
//
// Entry points: newFlyProvider (only when config.yaml has a `fly:` block: app, region, image, ports,
// cpuKind, endpoint), and the provider methods. (*flyProvider).do is THE helper: every API call goes
// through it. runOverCall is runProc's path for a process that is one API call (computers_exec.go).
//
// Rules: the token is read from the environment at each call, sent only in the Authorization header,
// never logged nor put in an error. A machine is named agentd-<id> and carries metadata agentd_owner
// and agentd_id, so a restarted server finds (adopts) its machines by metadata; the Fly machine id is
// cached in memory only. Create asks for the guest rounded as Fly requires (cpus 1, 2, 4, 8 or 16;
// memory a multiple of 256 MB within the kind's per-CPU range), waits for `started` with the wait
// endpoint, and destroys the machine when it does not start. Exec is the API's exec endpoint: output
// arrives once the command ends (no streaming, no tty), stdin and stdout travel base64-encoded through
// a /bin/sh wrapper (the image needs sh, base64 and mktemp), and files go through the same scripts as
// docker's (engineFS) over that exec. Ports are declared at create (fly.ports) and published on the
// app's address; other ports are refused. A Fly machine has the network Fly gives it: modes other than
// full are refused (501), never silently widened. Verified against a loopback server speaking the
// wire format of Fly's public API reference (computers_fly_test.go), not against the real service.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// flyConfig is config.yaml's `fly:` block.
type flyConfig struct {
	App      string `yaml:"app"`
	Region   string `yaml:"region"`   // empty: Fly picks the region nearest the API's edge
	Image    string `yaml:"image"`    // empty: the flavor's image (a registry image Fly can pull)
	Ports    []int  `yaml:"ports"`    // guest ports published on the app's address at create
	CPUKind  string `yaml:"cpuKind"`  // shared (default) or performance
	Endpoint string `yaml:"endpoint"` // default https://api.machines.dev (http://_api.internal:4280 inside Fly's network)

	startTimeout time.Duration // not a key: flyStartTimeout unless a test shortens it
}

const (
	flyDefaultEndpoint = "https://api.machines.dev"
	flyStartTimeout    = 3 * time.Minute // a machine not started by then is destroyed and the create fails
	flyWaitSlice       = 60              // seconds one wait call blocks at most (the API's own ceiling)
	flyCallTimeout     = 30 * time.Second
	flyErrorBody       = 64 << 10 // bytes of an error body read
)

type flyProvider struct {
	c    *computerService
	cfg  flyConfig
	http *http.Client

	mu  sync.Mutex
	ids map[string]string // agentd id → Fly machine id (a cache; the metadata is the truth)
}

func newFlyProvider(cfg flyConfig, c *computerService) *flyProvider {
	if cfg.Endpoint == "" {
		cfg.Endpoint = flyDefaultEndpoint
	}
	cfg.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	if cfg.CPUKind == "" {
		cfg.CPUKind = "shared"
	}
	if cfg.startTimeout == 0 {
		cfg.startTimeout = flyStartTimeout
	}
	return &flyProvider{c: c, cfg: cfg, ids: map[string]string{}, http: &http.Client{}}
}

func (f *flyProvider) meta() providerMeta {
	return providerMeta{name: "fly", description: "Fly.io Machines through the Machines API (a Firecracker microVM per machine, on Fly's hosts)",
		priority: 70, isolated: true, isolationKind: "vm"}
}

// ---- the API ----

// flyAPIError is a non-2xx answer: the status and Fly's `error` message (never the request's token).
type flyAPIError struct {
	method, path string
	status       int
	msg          string
}

func (e *flyAPIError) Error() string {
	return fmt.Sprintf("Fly Machines API %s %s: %d %s", e.method, e.path, e.status, e.msg)
}

func flyStatus(err error) int {
	var fe *flyAPIError
	if errors.As(err, &fe) {
		return fe.status
	}
	return 0
}

// do is THE helper: one call to the Machines API, in JSON both ways; out nil discards the answer.
func (f *flyProvider) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	token := f.c.getenv("FLY_API_TOKEN")
	if token == "" {
		return errorf(codeConfig, "FLY_API_TOKEN is not set").withHint("export FLY_API_TOKEN=$(fly auth token) (or an app-scoped deploy token) before starting agentd")
	}
	u := f.cfg.Endpoint + "/v1" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) { // the URL is the configured endpoint's, with no secret in it
			err = ue.Err
		}
		return fmt.Errorf("Fly Machines API %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, flyErrorBody))
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return &flyAPIError{method: method, path: path, status: resp.StatusCode, msg: strings.ReplaceAll(msg, token, "[token]")}
	}
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("Fly Machines API %s %s: undecodable answer: %v", method, path, err)
	}
	return nil
}

// flyMachine is the Machine object the API answers with (the fields agentd reads).
type flyMachine struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	State      string `json:"state"`
	Region     string `json:"region"`
	InstanceID string `json:"instance_id"`
	PrivateIP  string `json:"private_ip"`
	Config     struct {
		Image    string            `json:"image"`
		Metadata map[string]string `json:"metadata"`
	} `json:"config"`
}

func (f *flyProvider) machines() string { return "/apps/" + url.PathEscape(f.cfg.App) + "/machines" }

func (f *flyProvider) machinePath(fid, tail string) string {
	return f.machines() + "/" + url.PathEscape(fid) + tail
}

// flyGuest rounds a spec's cpus and memory to a size Fly accepts: cpus 1, 2, 4, 8 (16 on performance),
// memory a multiple of 256 MB, at least the kind's minimum per CPU (256 MB shared, 2048 MB performance)
// and at most its maximum (2048 MB shared, 8192 MB performance per CPU); more memory than a CPU count
// allows takes more CPUs. An impossible size is refused (422), never shrunk.
func flyGuest(kind string, cpus float64, memoryMB int) (int, int, error) {
	minPer, maxPer, maxCPUs := 256, 2048, 8
	if kind == "performance" {
		minPer, maxPer, maxCPUs = 2048, 8192, 16
	}
	n := 1
	for float64(n) < cpus || n*maxPer < memoryMB {
		n *= 2
	}
	if n > maxCPUs {
		return 0, 0, errorf(codeSpecInvalid, "cpus %g and memoryMb %d are more than a %s Fly machine has (%d CPUs, %d MB)", cpus, memoryMB, kind, maxCPUs, maxCPUs*maxPer).
			withHint("ask for less, or set fly.cpuKind: performance in config.yaml, " + takesEffect("fly"))
	}
	mem := int(math.Ceil(float64(memoryMB)/256)) * 256
	mem = max(mem, n*minPer)
	return n, mem, nil
}

// createBody is the POST /apps/{app}/machines request.
func (f *flyProvider) createBody(m *ComputerInfo) (map[string]any, error) {
	cpus, mem, err := flyGuest(f.cfg.CPUKind, m.Spec.CPUs, m.Spec.MemoryMB)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for k, v := range m.Spec.Env {
		env[k] = v
	}
	env["AGENTD_COMPUTER_ID"] = m.ID
	cfg := map[string]any{
		"image":    f.image(m),
		"guest":    map[string]any{"cpu_kind": f.cfg.CPUKind, "cpus": cpus, "memory_mb": mem},
		"env":      env,
		"metadata": map[string]string{"agentd_owner": f.c.owner, "agentd_id": m.ID},
		// The image's own command may end at once (a shell); the machine idles until agentd execs in it.
		"init":         map[string]any{"exec": []string{"/bin/sleep", "inf"}},
		"restart":      map[string]any{"policy": "no"},
		"auto_destroy": false,
	}
	if len(f.cfg.Ports) > 0 {
		var svcs []map[string]any
		for _, p := range f.cfg.Ports {
			svcs = append(svcs, map[string]any{"protocol": "tcp", "internal_port": p,
				"ports": []map[string]any{{"port": p}}, "autostop": "off", "autostart": false})
		}
		cfg["services"] = svcs
	}
	body := map[string]any{"name": "agentd-" + m.ID, "config": cfg}
	if f.cfg.Region != "" {
		body["region"] = f.cfg.Region
	}
	return body, nil
}

func (f *flyProvider) image(m *ComputerInfo) string {
	if f.cfg.Image != "" && m.Spec.Image == "" {
		return f.cfg.Image
	}
	return m.Image
}

// ---- lifecycle ----

func (f *flyProvider) probe(ctx context.Context) probeResult {
	if f.cfg.App == "" {
		return probeResult{reason: "fly.app is not set in config.yaml", hint: "set fly: {app: NAME, region: CODE}; create the app first with fly apps create NAME"}
	}
	var app struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	}
	err := f.do(ctx, "GET", "/apps/"+url.PathEscape(f.cfg.App), nil, nil, &app)
	switch st := flyStatus(err); {
	case err == nil:
		return probeResult{available: true, version: "machines-api v1 (app " + f.cfg.App + ")"}
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return probeResult{reason: "the Fly Machines API refused FLY_API_TOKEN: " + err.Error(), hint: "make a token with fly tokens create deploy -a " + f.cfg.App}
	case st == http.StatusNotFound:
		return probeResult{reason: "the Fly app " + f.cfg.App + " does not exist", hint: "fly apps create " + f.cfg.App}
	default:
		return probeResult{reason: "cannot reach the Fly Machines API: " + err.Error(), hint: "check the network, fly.endpoint and FLY_API_TOKEN"}
	}
}

func (f *flyProvider) supports(sp ComputerSpec) error {
	refuse := func(what, hint string) error {
		return errorf(codeNotImplemented, "the fly provider cannot honour %s", what).withHint(hint)
	}
	switch {
	case len(sp.Mounts) > 0:
		return refuse("mounts (a Fly machine has no access to this host's files)", "drop mounts; upload files instead")
	case sp.User != "":
		return refuse("user (Fly's exec runs as root)", "omit user")
	case sp.Network.Mode != "full":
		return refuse("network mode "+strconv.Quote(sp.Network.Mode)+" (a Fly machine has Fly's full network, which agentd cannot restrict)",
			`use network: {mode: full}, or provider docker or podman for egress rules`)
	}
	return nil
}

// fullNetworkOnly: a machine here must ask for network mode full (the proof's trial does).
func (f *flyProvider) fullNetworkOnly() bool { return true }

// fid is the Fly machine id of m: from the cache, else found by metadata (a restarted server); "" when
// Fly has no such machine.
func (f *flyProvider) fid(ctx context.Context, m *ComputerInfo) (string, error) {
	f.mu.Lock()
	id := f.ids[m.ID]
	f.mu.Unlock()
	if id != "" {
		return id, nil
	}
	all, err := f.list(ctx)
	if err != nil {
		return "", err
	}
	for _, fm := range all {
		if fm.Config.Metadata["agentd_id"] == m.ID && fm.Config.Metadata["agentd_owner"] == f.c.owner && !flyGone(fm.State) {
			f.remember(m.ID, fm.ID)
			return fm.ID, nil
		}
	}
	return "", nil
}

func (f *flyProvider) remember(id, fid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fid == "" {
		delete(f.ids, id)
	} else {
		f.ids[id] = fid
	}
}

// list is every machine of the app whose metadata says this server owns it.
func (f *flyProvider) list(ctx context.Context) ([]flyMachine, error) {
	var all []flyMachine
	q := url.Values{"metadata.agentd_owner": {f.c.owner}} // a filter the API applies; checked again below
	if err := f.do(ctx, "GET", f.machines(), q, nil, &all); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(fm flyMachine) bool { return fm.Config.Metadata["agentd_owner"] != f.c.owner }), nil
}

func flyGone(state string) bool {
	return state == "destroyed" || state == "destroying" || state == "replaced"
}

func (f *flyProvider) create(ctx context.Context, m *ComputerInfo) error {
	body, err := f.createBody(m)
	if err != nil {
		return err
	}
	var fm flyMachine
	if err := f.do(ctx, "POST", f.machines(), nil, body, &fm); err != nil {
		return f.failed("create", err)
	}
	f.remember(m.ID, fm.ID)
	if err := f.waitState(ctx, fm.ID, fm.InstanceID, "started"); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flyCallTimeout)
		defer cancel()
		if derr := f.destroyFID(dctx, m.ID, fm.ID); derr != nil {
			return errorf(codeComputerFailed, "the Fly machine %s did not start (%v), and destroying it failed: %v", fm.ID, err, derr).
				withHint("delete it with fly machine destroy --force " + fm.ID)
		}
		return errorf(codeComputerFailed, "the Fly machine %s did not start: %v; it was destroyed", fm.ID, err).
			withHint("check the image exists and Fly has capacity in the region (fly.region)")
	}
	return nil
}

// waitState blocks until the machine reaches state, through the wait endpoint (at most 60 s a call),
// up to flyStartTimeout or ctx's end.
func (f *flyProvider) waitState(ctx context.Context, fid, instance, state string) error {
	deadline := time.Now().Add(f.cfg.startTimeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("not %s after %s", state, f.cfg.startTimeout)
		}
		secs := min(flyWaitSlice, max(1, int(left.Seconds())))
		q := url.Values{"state": {state}, "timeout": {strconv.Itoa(secs)}}
		if instance != "" {
			q.Set("instance_id", instance)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+flyCallTimeout)
		err := f.do(wctx, "GET", f.machinePath(fid, "/wait"), q, nil, nil)
		cancel()
		switch st := flyStatus(err); {
		case err == nil:
			return nil
		case st == http.StatusRequestTimeout: // the API's own timeout: the machine is not there yet
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return err
		}
	}
}

func (f *flyProvider) failed(op string, err error) error {
	if _, ok := err.(*apiError); ok {
		return err
	}
	return errorf(codeComputerFailed, "fly %s failed: %v", op, err).withHint("check fly.app, fly.region and FLY_API_TOKEN; the doctor probes the API")
}

func (f *flyProvider) start(ctx context.Context, m *ComputerInfo) error {
	fid, err := f.fid(ctx, m)
	if err != nil {
		return f.failed("start", err)
	}
	if fid == "" {
		return errorf(codeComputerFailed, "the Fly machine of computer %s is gone", m.ID).withHint("delete the computer and create another")
	}
	var fm flyMachine
	if err := f.do(ctx, "GET", f.machinePath(fid, ""), nil, nil, &fm); err != nil {
		return f.failed("start", err)
	}
	if fm.State == "started" {
		return nil
	}
	if err := f.do(ctx, "POST", f.machinePath(fid, "/start"), nil, nil, nil); err != nil {
		return f.failed("start", err)
	}
	if err := f.waitState(ctx, fid, "", "started"); err != nil {
		return f.failed("start", err)
	}
	return nil
}

func (f *flyProvider) stop(ctx context.Context, m *ComputerInfo) error {
	fid, err := f.fid(ctx, m)
	if err != nil || fid == "" {
		return err
	}
	if err := f.do(ctx, "POST", f.machinePath(fid, "/stop"), nil, map[string]any{}, nil); err != nil && flyStatus(err) != http.StatusNotFound {
		return f.failed("stop", err)
	}
	if err := f.waitState(ctx, fid, "", "stopped"); err != nil && flyStatus(err) != http.StatusNotFound {
		return f.failed("stop", err)
	}
	return nil
}

func (f *flyProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	fid, err := f.fid(ctx, m)
	if err != nil {
		return f.failed("destroy", err)
	}
	if fid == "" {
		return nil
	}
	return f.destroyFID(ctx, m.ID, fid)
}

// destroyFID deletes the machine, running or not; one already gone is not an error.
func (f *flyProvider) destroyFID(ctx context.Context, id, fid string) error {
	err := f.do(ctx, "DELETE", f.machinePath(fid, ""), url.Values{"force": {"true"}}, nil, nil)
	if err != nil && flyStatus(err) != http.StatusNotFound {
		return f.failed("destroy", err)
	}
	f.remember(id, "")
	return nil
}

func (f *flyProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	fid, err := f.fid(ctx, m)
	if err != nil {
		return "", err
	}
	if fid == "" {
		return "missing", nil
	}
	var fm flyMachine
	if err := f.do(ctx, "GET", f.machinePath(fid, ""), nil, nil, &fm); err != nil {
		if flyStatus(err) == http.StatusNotFound {
			f.remember(m.ID, "")
			return "missing", nil
		}
		return "", err
	}
	switch {
	case flyGone(fm.State):
		f.remember(m.ID, "")
		return "missing", nil
	case fm.State == "started":
		return "running", nil
	}
	return "stopped", nil
}

func (f *flyProvider) owned(ctx context.Context) (map[string]bool, error) {
	all, err := f.list(ctx)
	if err != nil {
		return nil, err
	}
	res := map[string]bool{}
	for _, fm := range all {
		if id := fm.Config.Metadata["agentd_id"]; id != "" && !flyGone(fm.State) {
			res[id] = fm.State == "started"
			f.remember(id, fm.ID)
		}
	}
	return res, nil
}

// killLeftovers: every exec is bounded by the API's own timeout, so nothing of a previous server's
// calls outlives it for long; there are no process groups to find from outside.
func (f *flyProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int { return 0 }

// ---- exec ----

// flyWrapper runs "$@" in cwd $2 with stdin (base64 when $1 is 1) and prints its stdout base64-encoded,
// so that any bytes cross the API's JSON strings; the exit status is the command's.
const flyWrapper = `in=$1 dir=$2; shift 2
cd -- "$dir" || exit 126
t=$(mktemp) || exit 125
if [ "$in" = 1 ]; then base64 -d | "$@" >"$t"; else "$@" </dev/null >"$t"; fi
rc=$?; base64 <"$t"; rm -f -- "$t"; exit $rc`

// flyExecResult is the exec endpoint's answer.
type flyExecResult struct {
	ExitCode   int    `json:"exit_code"`
	ExitSignal int    `json:"exit_signal"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
}

// execCall runs argv in the machine through the exec endpoint: stdin in, stdout and stderr out, the
// exit code (128+signal when killed); timeout bounds the command on Fly's side.
func (f *flyProvider) execCall(ctx context.Context, m *ComputerInfo, cwd string, env map[string]string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fid, err := f.fid(ctx, m)
	if err != nil {
		return 0, err
	}
	if fid == "" {
		return 0, errorf(codeComputerFailed, "the Fly machine of computer %s is gone", m.ID).withHint("delete the computer and create another")
	}
	in := "0"
	req := map[string]any{}
	if stdin != nil {
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return 0, err
		}
		in, req["stdin"] = "1", base64.StdEncoding.EncodeToString(b)
	}
	if cwd == "" {
		cwd = m.Workdir
	}
	cmd := []string{"/bin/sh", "-c", flyWrapper, "agentd", in, cwd}
	if len(env) > 0 {
		cmd = append(cmd, "env")
		for _, k := range sortedKeys(env) {
			cmd = append(cmd, k+"="+env[k])
		}
	}
	req["command"] = append(cmd, argv...)
	secs := 3600
	if d, ok := ctx.Deadline(); ok {
		secs = max(1, int(math.Ceil(time.Until(d).Seconds())))
	}
	req["timeout"] = secs
	var res flyExecResult
	if err := f.do(ctx, "POST", f.machinePath(fid, "/exec"), nil, req, &res); err != nil {
		return 0, err
	}
	stdout.Write(flyStdout(res.Stdout))
	io.WriteString(stderr, res.Stderr)
	if res.ExitCode == 0 && res.ExitSignal > 0 {
		return 128 + res.ExitSignal, nil
	}
	return res.ExitCode, nil
}

// flyStdout is the command's stdout from the wrapper's base64 (line-wrapped); what is not base64 (the
// shell failed before the wrapper ran) is passed as it came.
func flyStdout(s string) []byte {
	out, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return []byte(s)
	}
	return out
}

func (f *flyProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	if p.tty || p.term != nil {
		return nil, errorf(codeNotImplemented, "the fly provider has no tty (Fly's exec API answers once the command ends)").
			withHint("omit tty, or use provider docker, podman or kubernetes")
	}
	if p.user != "" && p.user != "0:0" && p.user != "root" && p.user != "0" {
		return nil, errorf(codeNotImplemented, "the fly provider cannot run a command as another user (Fly's exec runs as root)").withHint("omit user")
	}
	env := map[string]string{}
	for k, v := range m.Spec.Env {
		env[k] = v
	}
	for k, v := range p.env {
		env[k] = v
	}
	argv, cwd := p.argv, p.cwd
	return &procHandle{call: func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		return f.execCall(ctx, m, cwd, env, argv, stdin, stdout, stderr)
	}}, nil
}

// runOverCall is runProc's second half when the process is one API call (fly): the same result, errors,
// timeout and abort behaviour as the other paths; the output arrives when the call returns.
func (c *computerService) runOverCall(ctx, tctx context.Context, p provider, m *ComputerInfo, h *procHandle, stdin io.Reader, stdout, stderr *outputSink) (*ExecResult, error) {
	start := time.Now()
	code, err := h.call(tctx, stdin, stdout, stderr)
	res := collected(start, stdout, stderr)
	switch {
	case ctx.Err() != nil:
		return nil, errExecAborted(ctx)
	case tctx.Err() != nil:
		res.TimedOut, res.ExitCode = true, execTimedOutCode
		return res, nil
	case err != nil:
		if _, ok := err.(*apiError); ok {
			return nil, err
		}
		if st, serr := p.status(context.WithoutCancel(ctx), m); serr == nil && st == "missing" {
			return nil, c.markGone(ctx, m)
		}
		return nil, errorf(codeExecFailed, "exec failed in computer %s: %v", m.ID, err).
			withHint("check the machine is started (fly machine status) and FLY_API_TOKEN").withDetail("computerId", m.ID)
	}
	res.ExitCode = code
	return res, nil
}

// ---- files and ports ----

func (f *flyProvider) fs(m *ComputerInfo) machineFS {
	return &engineFS{c: f.c, m: m, call: func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv []string) (int, error) {
		return f.execCall(ctx, m, "/", nil, argv, stdin, stdout, stderr)
	}}
}

// guestAddr is the app's address on a port declared at create (fly.ports): Fly's proxy passes TCP to
// the machine. Every machine of the app that declares the port shares that address (Fly balances
// between them): one machine per app for ports that must reach one machine.
func (f *flyProvider) guestAddr(ctx context.Context, m *ComputerInfo, port int) (string, error) {
	if !slices.Contains(f.cfg.Ports, port) {
		return "", errorf(codeNotImplemented, "port %d was not declared for Fly machines: only fly.ports are published (at create)", port).
			withHint("add the port to fly.ports in config.yaml, " + takesEffect("fly") + ", and create a new computer")
	}
	return fmt.Sprintf("%s.fly.dev:%d", f.cfg.App, port), nil
}
