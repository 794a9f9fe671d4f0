// Command simplify measures two agentd binaries side by side against the same container engine, in one
// run and interleaved (each measurement alternates between the two servers, the first of a pair
// alternating too), for issue 27's before/after: the exec p50 of `true` over the API, 20 concurrent
// execs, a 100 MB exec stream over SSE, and create → first exec from the warm pool and cold.
//
// Usage: bench/simplify/run.sh BEFORE_REV AFTER_REV (it builds both binaries and runs this).
// Each server gets its own AGENT_HOME, port and warm pool of one; everything it made in the engine is
// removed at the end (by its agentd.owner label).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const hundredMB = "head -c 100000000 /dev/zero | tr '\\0' a"

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simplify bench:", err)
		os.Exit(1)
	}
}

type server struct {
	label, bin, home, base string
	cmd                    *exec.Cmd
	log                    *os.File
	machine                string // the machine the exec rows run on
}

func run() error {
	var bins, labels [2]string
	flag.StringVar(&bins[0], "before", "", "the before binary")
	flag.StringVar(&bins[1], "after", "", "the after binary")
	flag.StringVar(&labels[0], "before-label", "before", "what to call it")
	flag.StringVar(&labels[1], "after-label", "after", "what to call it")
	provider := flag.String("provider", "docker", "computer provider (docker or podman)")
	image := flag.String("image", "agentd-test:bookworm", "the base flavor's image")
	n := flag.Int("n", 200, "sequential execs per server")
	rounds := flag.Int("rounds", 10, "rounds of 20 concurrent execs per server")
	streams := flag.Int("streams", 3, "100 MB streams per server (median)")
	creates := flag.Int("creates", 5, "creates per server, from the pool and cold each")
	flag.Parse()
	if bins[0] == "" || bins[1] == "" {
		return errors.New("-before and -after name the two binaries")
	}
	dir, err := os.MkdirTemp("", "agentd-simplify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var srv [2]*server
	defer func() {
		for _, s := range srv {
			if s != nil {
				s.stop(*provider)
			}
		}
	}()
	for i := range srv {
		s := &server{label: labels[i], bin: bins[i], home: filepath.Join(dir, fmt.Sprint("home", i))}
		srv[i] = s
		if err := s.start(*provider, *image); err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
	}
	loadBefore := loadavg()
	started := time.Now().UTC()
	for _, s := range srv {
		m, err := s.create(map[string]any{})
		if err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
		s.machine = m
		for range 5 { // warm up
			if _, err := s.exec(m, "true"); err != nil {
				return fmt.Errorf("%s: %w", s.label, err)
			}
		}
	}
	// pairs runs f once per server, the first of the pair alternating with i.
	pairs := func(i int, f func(k int, s *server) error) error {
		for j := range 2 {
			k := (i + j) % 2
			if err := f(k, srv[k]); err != nil {
				return fmt.Errorf("%s: %w", srv[k].label, err)
			}
		}
		return nil
	}
	type row struct {
		what string
		val  [2]string
		p50  [2]time.Duration // what the ratio compares (lower is better)
	}
	var rows []row

	var seq [2][]time.Duration
	for i := range *n {
		if err := pairs(i, func(k int, s *server) error {
			d, err := s.exec(s.machine, "true")
			seq[k] = append(seq[k], d)
			return err
		}); err != nil {
			return err
		}
	}
	r := row{what: fmt.Sprintf("exec `true` over the API, p50 / p99 (n=%d)", *n)}
	for k := range 2 {
		r.val[k], r.p50[k] = ms(pct(seq[k], 0.5))+" / "+ms(pct(seq[k], 0.99)), pct(seq[k], 0.5)
	}
	rows = append(rows, r)

	var each, walls [2][]time.Duration
	for i := range *rounds {
		if err := pairs(i, func(k int, s *server) error {
			var mu sync.Mutex
			var errs []error
			var wg sync.WaitGroup
			start := time.Now()
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := s.exec(s.machine, "true")
					mu.Lock()
					each[k], errs = append(each[k], d), append(errs, err)
					mu.Unlock()
				}()
			}
			wg.Wait()
			walls[k] = append(walls[k], time.Since(start))
			return errors.Join(errs...)
		}); err != nil {
			return err
		}
	}
	r = row{what: fmt.Sprintf("20 concurrent execs, each p50 / p99 (%d rounds)", *rounds)}
	w := row{what: "20 concurrent execs, wall p50"}
	for k := range 2 {
		r.val[k], r.p50[k] = ms(pct(each[k], 0.5))+" / "+ms(pct(each[k], 0.99)), pct(each[k], 0.5)
		w.val[k], w.p50[k] = ms(pct(walls[k], 0.5)), pct(walls[k], 0.5)
	}
	rows = append(rows, r, w)

	var sse [2][]time.Duration
	for i := range *streams {
		if err := pairs(i, func(k int, s *server) error {
			d, err := s.stream(s.machine, hundredMB, 100_000_000)
			sse[k] = append(sse[k], d)
			return err
		}); err != nil {
			return err
		}
	}
	r = row{what: fmt.Sprintf("100 MB stdout through exec SSE, median of %d", *streams)}
	for k := range 2 {
		d := pct(sse[k], 0.5)
		r.val[k], r.p50[k] = fmt.Sprintf("%s (%.0f MB/s)", d.Round(time.Millisecond), 100/d.Seconds()), d
	}
	rows = append(rows, r)

	var pooled, cold [2][]time.Duration
	for i := range *creates {
		if err := pairs(i, func(k int, s *server) error {
			ready, err := s.poolReady()
			if err != nil {
				return err
			}
			d, id, err := s.createThenExec(map[string]any{})
			if err == nil && !slices.Contains(ready, id) {
				err = fmt.Errorf("the create made %s cold, though the pool held %v", id, ready)
			}
			pooled[k] = append(pooled[k], d)
			if err != nil {
				return err
			}
			d, _, err = s.createThenExec(map[string]any{"env": map[string]string{"BENCH": "cold"}}) // env: never from the pool
			cold[k] = append(cold[k], d)
			return err
		}); err != nil {
			return err
		}
	}
	p := row{what: fmt.Sprintf("create → first exec, from the warm pool, p50 (n=%d)", *creates)}
	c := row{what: fmt.Sprintf("create → first exec, cold, p50 (n=%d)", *creates)}
	for k := range 2 {
		p.val[k], p.p50[k] = ms(pct(pooled[k], 0.5)), pct(pooled[k], 0.5)
		c.val[k], c.p50[k] = ms(pct(cold[k], 0.5)), pct(cold[k], 0.5)
	}
	rows = append(rows, p, c)

	engine, _ := exec.Command(*provider, "version", "--format", "{{.Server.Version}}").Output()
	fmt.Printf("\n%s %s, %s (image %s), %d cores; load average %s before, %s after\n\n",
		started.Format("2006-01-02 15:04"), "UTC", *provider+" "+strings.TrimSpace(string(engine)), *image, runtime.NumCPU(),
		loadBefore, loadavg())
	fmt.Printf("| | %s | %s | %s ÷ %s |\n|---|---|---|---|\n", labels[0], labels[1], labels[1], labels[0])
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", r.what, r.val[0], r.val[1], float64(r.p50[1])/float64(r.p50[0]))
	}
	return nil
}

// ---- one server ----

func (s *server) start(provider, image string) error {
	if err := os.MkdirAll(s.home, 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf("computerProvider: %s\nmaxComputers: 8\nimages:\n  base: %s\nwarmPool:\n  base: 1\n", provider, image)
	if err := os.WriteFile(filepath.Join(s.home, "config.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.base = "http://127.0.0.1:" + strconv.Itoa(port)
	s.log, _ = os.Create(filepath.Join(s.home, "agentd.log"))
	s.cmd = exec.Command(s.bin, "serve", "--port", strconv.Itoa(port), "--log-level", "warn")
	s.cmd.Env = append(os.Environ(), "AGENT_HOME="+s.home)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := client.Get(s.base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no /health answer within a minute: " + s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server as a user does (SIGTERM) and removes what it left in the engine: the pool
// machines, which a stopped server keeps for its next start.
func (s *server) stop(provider string) {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			s.cmd.Process.Kill()
			<-done
		}
	}
	if owner, err := os.ReadFile(filepath.Join(s.home, "instance-id")); err == nil {
		out, _ := exec.Command(provider, "ps", "-aq", "--filter", "label=agentd.owner="+strings.TrimSpace(string(owner))).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command(provider, append([]string{"rm", "-f"}, ids...)...).Run()
		}
	}
	if s.log != nil {
		s.log.Close()
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.home, "agentd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (s *server) do(method, path string, body any, out any) error {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (s *server) create(spec map[string]any) (string, error) {
	var m struct {
		ID string `json:"id"`
	}
	err := s.do("POST", "/v1/computers", spec, &m)
	return m.ID, err
}

func (s *server) exec(id, cmd string) (time.Duration, error) {
	start := time.Now()
	var res struct {
		ExitCode *int `json:"exitCode"`
	}
	err := s.do("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": cmd}, &res)
	d := time.Since(start)
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("exec %q: exit code %v", cmd, res.ExitCode)
	}
	return d, err
}

// createThenExec is the time to a machine that has answered its first exec; the machine is deleted after.
func (s *server) createThenExec(spec map[string]any) (time.Duration, string, error) {
	start := time.Now()
	id, err := s.create(spec)
	if err != nil {
		return 0, "", err
	}
	_, err = s.exec(id, "true")
	d := time.Since(start)
	return d, id, errors.Join(err, s.do("DELETE", "/v1/computers/"+id, nil, nil))
}

// poolReady waits (untimed) for a full warm pool and returns its ready machines.
func (s *server) poolReady() ([]string, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var d struct {
			Pool struct {
				LastError string `json:"lastError"`
				Flavors   []struct {
					Target   int      `json:"target"`
					Ready    int      `json:"ready"`
					Machines []string `json:"machines"`
				} `json:"flavors"`
			} `json:"pool"`
		}
		if err := s.do("GET", "/v1/doctor", nil, &d); err != nil {
			return nil, err
		}
		if f := d.Pool.Flavors; len(f) == 1 && f[0].Ready == f[0].Target {
			return f[0].Machines, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the warm pool was not full within 5 minutes (last error %q)", d.Pool.LastError)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stream runs cmd through POST …/exec/stream and reads it as `curl -N` would, counting the stdout bytes
// of its frames without decoding them; it fails unless want bytes, a zero exit and `event: done` came.
func (s *server) stream(id, cmd string, want int64) (time.Duration, error) {
	b, _ := json.Marshal(map[string]any{"cmd": cmd, "timeoutSec": 600})
	req, _ := http.NewRequestWithContext(context.Background(), "POST", s.base+"/v1/computers/"+id+"/exec/stream", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		return 0, fmt.Errorf("exec/stream: %d %s", resp.StatusCode, msg)
	}
	r := bufio.NewReaderSize(resp.Body, 2<<20)
	const head, tail = `data: {"data":"`, `","type":"stdout"}`
	var got int64
	exited, done := false, false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				break
			}
			return 0, err
		}
		switch {
		case bytes.HasPrefix(line, []byte(head)):
			got += int64(len(bytes.TrimSuffix(line[len(head):], []byte("\n"))) - len(tail))
		case bytes.HasPrefix(line, []byte(`data: {"result":`)) || bytes.Contains(line, []byte(`"type":"exit"`)):
			exited = bytes.Contains(line, []byte(`"exitCode":0`))
		case string(line) == "event: done\n":
			done = true
		}
	}
	d := time.Since(start)
	if got != want || !exited || !done {
		return d, fmt.Errorf("exec/stream: %d of %d bytes, exit 0 %v, done %v", got, want, exited, done)
	}
	return d, nil
}

// ---- small things ----

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " ")
}
