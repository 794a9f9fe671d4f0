package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestComputerBenchReport measures what BENCHMARKS.md reports, per provider, beside the raw engine in
// the same run. It only runs with AGENT_BENCH=1:
//
//	AGENT_BENCH=1 go test -run TestComputerBenchReport -v -count=1 .
func TestComputerBenchReport(t *testing.T) {
	if os.Getenv("AGENT_BENCH") != "1" {
		t.Skip("set AGENT_BENCH=1 to measure")
	}
	var report strings.Builder
	provs := []string{"local", "sandbox", "docker", "podman"}
	if only := os.Getenv("AGENT_BENCH_PROVIDERS"); only != "" { // e.g. local,sandbox,docker
		provs = strings.Split(only, ",")
	}
	for _, prov := range provs {
		if prov == "sandbox" {
			e := newTestServer(t, withHostEnv)
			pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName(prov))
			e.close()
			if !pr.available {
				continue
			}
		} else if prov == "kubernetes" {
			if os.Getenv("AGENT_TEST_K8S") != "1" {
				continue
			}
		} else if prov != "local" {
			if _, err := exec.LookPath(prov); err != nil {
				continue
			}
		}
		benchProvider(t, prov, &report)
		if prov != "local" && os.Getenv("AGENT_BENCH_POOL") != "0" {
			benchPool(t, prov, &report)
		}
		if prov != "local" && prov != "sandbox" && os.Getenv("AGENT_TEST_CHANNEL") != "0" && os.Getenv("AGENT_BENCH_PERCALL") != "0" {
			benchProvider(t, prov, &report, func(c *testSetup) { c.ExecChannel, c.helperBinary = new(bool), "" })
		}
	}
	// AGENT_BENCH_RSS=200: agentd's RSS serving that many machines on docker and on kubernetes.
	if n, _ := strconv.Atoi(os.Getenv("AGENT_BENCH_RSS")); n > 0 {
		for _, prov := range provs {
			if prov == "docker" || prov == "kubernetes" {
				benchRSS(t, prov, n, &report)
			}
		}
	}
	t.Log("\n" + report.String())
}

// benchPool times create → first exec when the create takes a warm-pool machine (the pool of one is full
// when the timer starts; its refill after each take is not timed).
func benchPool(t *testing.T, prov string, out *strings.Builder) {
	e := newTestServer(t, withHostEnv, func(c *testSetup) {
		c.ComputerProvider, c.MaxComputers, c.WarmPool = prov, 8, map[string]int{"base": 1}
	})
	var creates, firsts []time.Duration
	for i := 0; i < 5; i++ {
		eventually(t, "the pool to refill", func() bool { // not GET /v1/doctor: it would start kubernetes' network check
			d, _ := e.s.computers.poolDoctor(context.Background())
			return len(d.Flavors) == 1 && d.Flavors[0].Ready == 1
		})
		pooled := e.pooledIDs()
		start := time.Now()
		m := e.create(map[string]any{})
		creates = append(creates, time.Since(start))
		if r := e.exec(m.ID, map[string]any{"cmd": "echo hi"}); r.Stdout != "hi\n" {
			t.Fatalf("exec: %+v", r)
		}
		firsts = append(firsts, time.Since(start))
		if !slices.Contains(pooled, m.ID) {
			t.Fatalf("%s: the create did not take the pool machine %v", prov, pooled)
		}
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	}
	fmt.Fprintf(out, "- %s from the warm pool: create p50 %s, create → first exec p50 %s (n=5)\n\n", prov, ms(pct(creates, 0.5)), ms(pct(firsts, 0.5)))
}

// benchRSS starts a real agentd (cliBinary: the README's build) on prov with the exec channel
// off (no helper copied into each machine; a channel is one more kubectl or docker exec per machine in
// use), creates n small machines 10 at a time, lists them, and reads agentd's RSS and that of its children
// (on kubernetes the pod watch's kubectl).
func benchRSS(t *testing.T, prov string, n int, out *strings.Builder) {
	cfg := fmt.Sprintf("computerProvider: %s\nexecChannel: false\nmaxComputers: %d\nimages: {base: %s}\n", prov, n+8, testImage)
	if prov == "kubernetes" {
		cfg += "kubernetes: {kubeconfig: \"" + os.Getenv("KUBECONFIG") + "\"}\n"
	}
	e, cmd := serveBinary(t, cliBinary(t), t.TempDir(), cfg)
	rss := func(pid int) (cur, peak int) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "VmRSS:" {
				cur, _ = strconv.Atoi(f[1])
			}
			if len(f) >= 2 && f[0] == "VmHWM:" {
				peak, _ = strconv.Atoi(f[1])
			}
		}
		return cur / 1024, peak / 1024
	}
	children := func() (names []string, total int) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, p := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(p)
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
				r, _ := rss(pid)
				total += r
				names = append(names, fmt.Sprintf("%s (%d MB)", strings.Join(argv[:min(6, len(argv))], " "), r))
			}
		}
		return names, total
	}
	idle, _ := rss(cmd.Process.Pid)
	ids := make([]string, n)
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ids[i] = e.create(map[string]any{"cpus": 0.05, "memoryMb": 64, "diskMb": 64, "idleTimeoutSec": 0}).ID
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	made := time.Since(start)
	var list []time.Duration
	for i := 0; i < 20; i++ {
		s := time.Now()
		var got struct{ Computers []ComputerInfo }
		e.call("GET", "/v1/computers?all=true", nil, 200, &got)
		list = append(list, time.Since(s))
		if len(got.Computers) != n {
			t.Fatalf("listed %d of %d", len(got.Computers), n)
		}
	}
	cur, peak := rss(cmd.Process.Pid)
	kids, kidsRSS := children()
	fmt.Fprintf(out, "- %s, %d machines (cpus 0.05, 64 MB; channel off), made 10 at a time in %s: agentd's RSS %d MB (idle at start %d MB, peak %d MB); GET /v1/computers?all=true p50 %s; its children: %d MB %v\n",
		prov, n, made.Round(time.Second), cur, idle, peak, ms(pct(list, 0.5)), kidsRSS, kids)
	work = make(chan int)
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				e.call("DELETE", "/v1/computers/"+ids[i], nil, 204, nil)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func benchProvider(t *testing.T, prov string, out *strings.Builder, opts ...testOption) {
	e := newTestServer(t, append([]testOption{withHostEnv, func(c *testSetup) { c.MaxComputers = 32 }}, opts...)...)
	path := ""
	if prov == "sandbox" {
		path = " (one bwrap per machine, its helper's exec channel)"
	} else if prov != "local" {
		path = " (exec channel on)"
		if e.s.computers.helper == "" {
			path = " (per-call path: exec channel off)"
		}
	}
	fmt.Fprintf(out, "### %s%s\n", prov, path)

	// create → first exec
	var firsts []time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		m := e.create(map[string]any{"provider": prov})
		e.exec(m.ID, map[string]any{"cmd": "echo hi"})
		firsts = append(firsts, time.Since(start))
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	}
	fmt.Fprintf(out, "- create → first exec: p50 %s (n=5)\n", ms(pct(firsts, 0.5)))

	m := e.create(map[string]any{"provider": prov})
	n := 200
	if prov != "local" {
		n = 100
	}
	if v, err := strconv.Atoi(os.Getenv("AGENT_BENCH_N")); err == nil && v > 0 { // a shorter run
		n = v
	}
	// Warm up, then the API round trip of `echo hi`.
	for i := 0; i < 5; i++ {
		e.exec(m.ID, map[string]any{"cmd": "echo hi"})
	}
	var api []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		r := e.exec(m.ID, map[string]any{"cmd": "echo hi"})
		api = append(api, time.Since(start))
		if r.Stdout != "hi\n" {
			t.Fatalf("exec: %+v", r)
		}
	}
	fmt.Fprintf(out, "- exec `echo hi` through the API: p50 %s, p99 %s (n=%d)\n", ms(pct(api, 0.5)), ms(pct(api, 0.99)), n)
	if prov != "local" && prov != "sandbox" {
		var raw []time.Duration
		for i := 0; i < n; i++ {
			start := time.Now()
			cmd := exec.Command(prov, "exec", "agentd-"+m.ID, "echo", "hi")
			if k, ok := e.s.computers.providerByName(prov).(*kubeProvider); ok { // plain kubectl exec
				cmd = exec.Command("kubectl", "-n", k.cfg.Namespace, "exec", k.pod(&m), "-c", kubeContainer, "--", "echo", "hi")
			}
			if b, err := cmd.Output(); err != nil || string(b) != "hi\n" {
				t.Fatalf("raw exec: %v %q", err, b)
			}
			raw = append(raw, time.Since(start))
		}
		raw0 := prov + " exec <ctr>"
		if prov == "kubernetes" {
			raw0 = "kubectl exec <pod> --"
		}
		fmt.Fprintf(out, "- raw `%s echo hi`: p50 %s, p99 %s (n=%d) → API/raw p50 = %.2f×\n", raw0,
			ms(pct(raw, 0.5)), ms(pct(raw, 0.99)), n, float64(pct(api, 0.5))/float64(pct(raw, 0.5)))
	}

	// 4 KB file write and read through the API.
	file := strings.Repeat("0123456789abcde\n", 256)
	var wr, rd []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		e.call("PUT", "/v1/computers/"+m.ID+"/fs/write?path=/work/f.txt", []byte(file), 204, nil)
		wr = append(wr, time.Since(start))
		start = time.Now()
		if got := e.call("GET", "/v1/computers/"+m.ID+"/fs/read?path=/work/f.txt", nil, 200, nil); string(got.body) != file {
			t.Fatalf("read back %d bytes", len(got.body))
		}
		rd = append(rd, time.Since(start))
	}
	fmt.Fprintf(out, "- 4 KB file write / read through the API: p50 %s / %s, p99 %s / %s (n=%d)\n",
		ms(pct(wr, 0.5)), ms(pct(rd, 0.5)), ms(pct(wr, 0.99)), ms(pct(rd, 0.99)), n)

	// 100 MB through exec SSE (median of 3), beside the same command through Exec with no consumer and
	// through the raw engine (or the host's shell, for local) into /dev/null.
	const hundredMB = "head -c 100000000 /dev/zero | tr '\\0' a"
	var sses, directs, raws []time.Duration
	var frames int
	for range 3 {
		start := time.Now()
		if _, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: hundredMB}, TimeoutSec: 600}, nil); err != nil {
			t.Fatal(err)
		}
		directs = append(directs, time.Since(start))
		start = time.Now()
		var got int64
		var done bool
		frames, got, done = streamExecCount(e, m.ID, hundredMB)
		sses = append(sses, time.Since(start))
		if !done || got != 100000000 {
			t.Fatalf("sse: got %d bytes in %d frames (done=%v)", got, frames, done)
		}
		if raw := rawHundredMB(t, e, prov, &m); raw > 0 {
			raws = append(raws, raw)
		}
	}
	sse := pct(sses, 0.5)
	fmt.Fprintf(out, "- 100 MB stdout through exec SSE (median of 3): %s, %.0f MB/s (%d frames); the same command through Exec with no consumer: %s",
		sse.Round(time.Millisecond), 100/sse.Seconds(), frames, pct(directs, 0.5).Round(time.Millisecond))
	if len(raws) > 0 {
		fmt.Fprintf(out, "; raw (%s) into /dev/null: %s", rawWhat(prov), pct(raws, 0.5).Round(time.Millisecond))
	}
	fmt.Fprintln(out)

	// 20 concurrent execs on one machine.
	var wg sync.WaitGroup
	lat := make([]time.Duration, 20)
	start := time.Now()
	for i := range lat {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			e.exec(m.ID, map[string]any{"cmd": "echo hi"})
			lat[i] = time.Since(s)
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "- 20 concurrent `echo hi` on one machine: all done in %s, per exec p50 %s, max %s\n",
		ms(time.Since(start)), ms(pct(lat, 0.5)), ms(pct(lat, 1)))
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)

	// Machines created in parallel (20, or AGENT_BENCH_PARALLEL), small enough that 20 pods' requests fit
	// on one 2-core node.
	par := 20
	if v, err := strconv.Atoi(os.Getenv("AGENT_BENCH_PARALLEL")); err == nil && v > 0 {
		par = v
	}
	ids := make([]string, par)
	start = time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = e.create(map[string]any{"provider": prov, "cpus": 0.5, "memoryMb": 256}).ID
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "- %d machines (cpus 0.5, 256 MB) created in parallel: %s wall\n\n", par, ms(time.Since(start)))
	for _, id := range ids {
		e.call("DELETE", "/v1/computers/"+id, nil, 204, nil)
	}
}

// streamExecCount counts the frames and stdout bytes of an exec/stream the way a lean consumer does
// (curl into a file, say): it reads the stream whole but does not decode the output frames, whose JSON
// decoding would be the client's cost, not the server's: a frame's byte count is its raw JSON string's
// length, exact for output that needs no escapes (the benchmarks' 'a's). The exit frame is decoded: the
// command must have succeeded.
func streamExecCount(e *testServer, id, cmd string) (frames int, stdout int64, done bool) {
	resp, err := http.DefaultClient.Do(e.request(context.Background(), "POST", "/v1/computers/"+id+"/exec/stream", map[string]any{"cmd": cmd, "timeoutSec": 600}, nil))
	if err != nil || resp.StatusCode != 200 {
		e.t.Fatalf("exec/stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 2<<20)
	const head, tail = `data: {"data":"`, `","type":"stdout"}`
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return frames, stdout, done
		}
		switch {
		case bytes.HasPrefix(line, []byte(head)):
			body := bytes.TrimSuffix(line[len(head):], []byte("\n"))
			if !bytes.HasSuffix(body, []byte(tail)) {
				e.t.Fatalf("an output frame that is not stdout: %.100q", body)
			}
			stdout += int64(len(body) - len(tail))
			frames++
		case done: // the data line of `event: done`
		case bytes.HasPrefix(line, []byte("data: ")):
			var f struct {
				Type   string      `json:"type"`
				Result *ExecResult `json:"result"`
			}
			if json.Unmarshal(line[len("data: "):], &f) != nil || f.Type != "exit" || f.Result == nil || f.Result.ExitCode != 0 {
				e.t.Fatalf("not a successful exit frame: %.200q", line)
			}
			frames++
		case string(line) == "event: done\n":
			done = true
		}
	}
}

// rawHundredMB times the 100 MB command with no agentd at all, into /dev/null: the engine's own exec
// (docker, podman, kubectl), or the host's shell for local; 0 where there is no such floor.
func rawHundredMB(t *testing.T, e *testServer, prov string, m *ComputerInfo) time.Duration {
	var cmd *exec.Cmd
	switch prov {
	case "local":
		cmd = exec.Command("sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' a")
	case "docker", "podman":
		cmd = exec.Command(prov, "exec", "agentd-"+m.ID, "sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' a")
	case "kubernetes":
		k := e.s.computers.providerByName(prov).(*kubeProvider)
		cmd = exec.Command("kubectl", "-n", k.cfg.Namespace, "exec", k.pod(m), "-c", kubeContainer, "--", "sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' a")
	default:
		return 0
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd.Stdout = null
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("raw 100 MB: %v", err)
	}
	return time.Since(start)
}

func rawWhat(prov string) string {
	if prov == "local" {
		return "the host's sh"
	}
	if prov == "kubernetes" {
		return "kubectl exec"
	}
	return prov + " exec"
}

// Create → first exec, three ways, in one run (docker; AGENT_TEST_DOCKER=1):
//
//	AGENT_TEST_DOCKER=1 go test -run '^$' -bench 'Create' -benchtime 20x .
//
// BenchmarkCreateFromPool takes a warm-pool machine; BenchmarkCreateCold makes one (the pool is off);
// BenchmarkCreateRawDocker is the floor: the same `docker run -d` argv agentd uses, then a plain
// `docker exec <ctr> echo hi`. Each reports its median as p50-ms beside the mean.
func benchDocker(b *testing.B) {
	if os.Getenv("AGENT_TEST_DOCKER") != "1" {
		b.Skip("set AGENT_TEST_DOCKER=1 to measure creates on docker")
	}
	if err := exec.Command("docker", "image", "inspect", testImage).Run(); err != nil {
		b.Fatalf("docker or the test image %s is missing: %v", testImage, err)
	}
}

func reportP50(b *testing.B, ds, creates []time.Duration) {
	if len(ds) > 0 {
		b.ReportMetric(float64(pct(ds, 0.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(pct(creates, 0.5).Microseconds())/1000, "create-p50-ms")
	}
}

// createThenExec times one create through the API and its first exec; the delete is not timed.
func createThenExec(b *testing.B, e *testServer, spec map[string]any, creates *[]time.Duration) (string, time.Duration) {
	start := time.Now()
	m := e.create(spec)
	*creates = append(*creates, time.Since(start))
	if r := e.exec(m.ID, map[string]any{"cmd": "echo hi"}); r.Stdout != "hi\n" {
		b.Fatalf("exec: %+v", r)
	}
	d := time.Since(start)
	b.StopTimer()
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	return m.ID, d
}

func BenchmarkCreateFromPool(b *testing.B) {
	benchDocker(b)
	e := newTestServer(b, withHostEnv, func(c *testSetup) {
		c.ComputerProvider, c.MaxComputers, c.WarmPool = "docker", 8, map[string]int{"base": 2}
	})
	c := e.s.computers
	var ds, creates []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		var ready []string
		eventually(b, "a ready pool machine", func() bool {
			c.pool.mu.Lock()
			defer c.pool.mu.Unlock()
			ready = slices.Clone(c.pool.ready["base"])
			return len(ready) == 2 // full: no refill in flight when the timer starts
		})
		b.StartTimer()
		id, d := createThenExec(b, e, map[string]any{"name": "bench"}, &creates)
		if id != ready[0] {
			b.Fatalf("%s was made cold (the pool held %v)", id, ready)
		}
		ds = append(ds, d)
		b.StartTimer()
	}
	b.StopTimer()
	reportP50(b, ds, creates)
}

func BenchmarkCreateCold(b *testing.B) {
	benchDocker(b)
	e := newTestServer(b, withHostEnv, func(c *testSetup) { c.ComputerProvider, c.MaxComputers = "docker", 8 })
	var ds, creates []time.Duration
	b.ResetTimer()
	for range b.N {
		_, d := createThenExec(b, e, map[string]any{"name": "bench"}, &creates)
		ds = append(ds, d)
		b.StartTimer()
	}
	b.StopTimer()
	reportP50(b, ds, creates)
}

func BenchmarkCreateRawDocker(b *testing.B) {
	benchDocker(b)
	e := newTestServer(b, withHostEnv)
	ep := e.s.computers.providerByName("docker").(*engineProvider)
	var ds, creates []time.Duration
	b.ResetTimer()
	for range b.N {
		m := &ComputerInfo{ID: newID("cmp"), Image: testImage, Workdir: "/work"}
		applyComputerDefaults(&m.Spec)
		start := time.Now()
		if out, err := exec.Command("docker", ep.runArgs(m)...).CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		creates = append(creates, time.Since(start))
		if out, err := exec.Command("docker", "exec", ep.container(m), "echo", "hi").Output(); err != nil || string(out) != "hi\n" {
			b.Fatalf("docker exec: %v %q", err, out)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		exec.Command("docker", "rm", "-f", ep.container(m)).Run()
		b.StartTimer()
	}
	b.StopTimer()
	reportP50(b, ds, creates)
}

// TestSandboxBenchReport measures what BENCHMARKS.md's sandbox section reports: create, create → first
// exec and exec p50 for sandbox beside local and docker, in one run (AGENT_BENCH=1):
//
//	AGENT_BENCH=1 go test -run TestSandboxBenchReport -v -count=1 .
func TestSandboxBenchReport(t *testing.T) {
	if os.Getenv("AGENT_BENCH") != "1" {
		t.Skip("set AGENT_BENCH=1 to measure")
	}
	var report strings.Builder
	fmt.Fprintf(&report, "| | create p50 | create → first exec p50 | exec `echo hi` via API p50 / p99 |\n|---|---|---|---|\n")
	for _, row := range []string{"local", "sandbox", "sandbox, network full", "sandbox, warm pool", "docker"} {
		prov, variant, _ := strings.Cut(row, ", ")
		pooled := variant == "warm pool"
		body := map[string]any{"provider": prov}
		if variant == "network full" { // as root: its own namespace, veth and rules (computers_sandboxnet.go)
			body["network"] = map[string]any{"mode": "full"}
		}
		e := newTestServer(t, withHostEnv, func(c *testSetup) {
			c.MaxComputers = 32
			if pooled {
				c.ComputerProvider, c.WarmPool = prov, map[string]int{"base": 1}
			}
		})
		if pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName(prov)); !pr.available {
			t.Logf("%s unavailable: %s", prov, pr.reason)
			continue
		}
		var creates, firsts []time.Duration
		for i := 0; i < 10; i++ {
			if pooled { // not timed: the refill after the previous take
				eventually(t, "the pool to refill", func() bool { return e.poolReady("base") == 1 })
			}
			start := time.Now()
			m := e.create(body)
			creates = append(creates, time.Since(start))
			e.exec(m.ID, map[string]any{"cmd": "echo hi"})
			firsts = append(firsts, time.Since(start))
			e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		}
		m := e.create(body)
		for i := 0; i < 5; i++ {
			e.exec(m.ID, map[string]any{"cmd": "echo hi"})
		}
		var api []time.Duration
		for i := 0; i < 100; i++ {
			start := time.Now()
			if r := e.exec(m.ID, map[string]any{"cmd": "echo hi"}); r.Stdout != "hi\n" {
				t.Fatalf("exec: %+v", r)
			}
			api = append(api, time.Since(start))
		}
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		if pooled {
			e.s.computers.drainPool(context.Background())
		}
		fmt.Fprintf(&report, "| %s | %s | %s | %s / %s |\n", row, ms(pct(creates, 0.5)), ms(pct(firsts, 0.5)), ms(pct(api, 0.5)), ms(pct(api, 0.99)))
	}
	// The floor on this host: a process started from Go, and a one-shot bwrap around the same command.
	var sh, bw []time.Duration
	sb := newSandboxProvider(&computerService{computerDeps: computerDeps{home: t.TempDir()}})
	args := append(sb.nsArgs(ComputerSpec{}, false), sb.systemArgs()...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--", "/bin/sh", "-c", "echo hi")
	for i := 0; i < 50; i++ {
		start := time.Now()
		exec.Command("/bin/sh", "-c", "echo hi").Output()
		sh = append(sh, time.Since(start))
		start = time.Now()
		exec.Command("bwrap", args...).Output()
		bw = append(bw, time.Since(start))
	}
	fmt.Fprintf(&report, "\nfloor: `sh -c 'echo hi'` from Go p50 %s; a one-shot `bwrap … sh -c 'echo hi'` p50 %s\n", ms(pct(sh, 0.5)), ms(pct(bw, 0.5)))
	// Where a cold create's time goes: the machine's own process (cgroup wrap, bwrap, the helper up to
	// its hello) against the helper started bare, and bwrap's setup around /bin/true.
	e := newTestServer(t, withHostEnv)
	if pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName("sandbox")); pr.available {
		sp := e.s.computers.providerByName("sandbox").(*sandboxProvider)
		m := e.create(map[string]any{"provider": "sandbox"})
		e.s.computers.closeChannel(e.s.computers.runtime(m.ID))
		full := func(argv []string) func() []string { return func() []string { return argv } }
		helperBare := []string{e.s.computers.helper, "machine-helper"}
		machine := func() []string { return sp.helperCmd(context.Background(), &m).Args }
		noCgroup := append(append([]string{sp.bwrap}, sp.startFlags(sp.remapped(), false)...), sp.bwrapArgs(&m)...)
		bwTrue := slices.Clone(noCgroup)
		for i, a := range bwTrue {
			if a == helperInMachine && i > 0 && bwTrue[i-1] == "--" {
				bwTrue = append(bwTrue[:i], "/bin/true")
				break
			}
		}
		var rows []string
		for _, c := range []struct {
			what string
			argv func() []string
		}{{"the helper alone, started from Go, to its hello", full(helperBare)},
			{"bwrap with the machine's arguments around /bin/true", full(bwTrue)},
			{"bwrap + the helper to its hello (no cgroup)", full(noCgroup)},
			{"the machine as agentd starts it (cgroup, bwrap, helper) to its hello", machine}} {
			var ds []time.Duration
			for i := 0; i < 30; i++ {
				argv := c.argv()
				start := time.Now()
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = sp.env(&m)
				run := cmd.Start
				if argv[0] != e.s.computers.helper { // bwrap: as root, agentd maps its user namespace
					run = func() error { return sp.startHelper(cmd, &m) }
				}
				if strings.HasSuffix(argv[len(argv)-1], "true") {
					if err := run(); err != nil {
						t.Fatal(err)
					}
					cmd.Wait()
					ds = append(ds, time.Since(start))
					continue
				}
				in, _ := cmd.StdinPipe()
				out, _ := cmd.StdoutPipe()
				if err := run(); err != nil {
					t.Fatal(err)
				}
				if _, kind, _, err := readFrame(out); err != nil || kind != frameHello {
					t.Fatalf("%s: %v %q", c.what, err, kind)
				}
				ds = append(ds, time.Since(start))
				in.Close()
				cmd.Process.Kill()
				cmd.Wait()
			}
			rows = append(rows, fmt.Sprintf("| %s | %s |", c.what, ms(pct(ds, 0.5))))
		}
		sp.cgroups().remove(m.ID)
		fmt.Fprintf(&report, "\n| a cold sandbox, part by part | p50 |\n|---|---|\n%s\n", strings.Join(rows, "\n"))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "\nload average at the end: %s", load)
	t.Log("\n" + report.String())
}
