// Command soak runs agentd under a mixed load for a while on loopback and samples the server's resident
// memory, threads and open descriptors every 10 s: runs (against a scripted OpenAI-compatible model served
// here), execs, file writes, reads, uploads and downloads, event sockets, and slow clients that trickle a
// body. It ends by itself; everything it talks to is on 127.0.0.1.
//
// Usage (from bench/): ./soak.sh [-duration 30m] [-provider local|docker]
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type counters struct{ runs, execs, files, sockets, slow, errors atomic.Int64 }

func run() error {
	duration := flag.Duration("duration", 30*time.Minute, "how long the load runs")
	provider := flag.String("provider", "local", "computer provider: local or docker")
	image := flag.String("image", "", "the base image (docker), e.g. agentd-test:bookworm")
	bin := flag.String("agentd", "", "the agentd binary (built from ../.. when empty)")
	flag.Parse()

	dir, err := os.MkdirTemp("", "agentd-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin = filepath.Join(dir, "agentd")
		build := exec.Command("go", "build", "-o", *bin, ".")
		build.Dir, build.Stdout, build.Stderr = "../..", os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building agentd: %w", err)
		}
	}
	model := &http.Server{Handler: http.HandlerFunc(scriptedModel)}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go model.Serve(ml)
	defer model.Close()

	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o700)
	cfg := "computerProvider: " + *provider + "\nmaxComputers: 16\n"
	if *image != "" {
		cfg += "images:\n  base: " + *image + "\n"
	}
	os.WriteFile(filepath.Join(home, "config.yaml"), []byte(cfg), 0o600)
	port := freePort()
	srv := exec.Command(*bin, "serve", "--port", strconv.Itoa(port), "--log-level", "warn")
	srv.Env = append(os.Environ(), "AGENT_HOME="+home, "OPENAI_BASE_URL=http://"+ml.Addr().String(), "OPENAI_API_KEY=sk-soak-0000000000000000")
	logf, _ := os.Create(filepath.Join(dir, "agentd.log"))
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Process.Kill()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	c := &client{base: base, http: &http.Client{Timeout: 2 * time.Minute}}
	deadline := time.Now().Add(30 * time.Second)
	for c.do("GET", "/health", nil, nil) != nil {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "agentd.log"))
			return fmt.Errorf("agentd did not start: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.do("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": "soak", "model": "openai/gpt-4o-mini",
		"tools": []string{"computer"}}}, nil); err != nil {
		return fmt.Errorf("creating the agent: %w", err)
	}
	var m struct{ ID string }
	if err := c.do("POST", "/v1/computers", map[string]any{"name": "soak-files", "idleTimeoutSec": 0}, &m); err != nil {
		return fmt.Errorf("creating a computer: %w", err)
	}

	var n counters
	var lastErr atomic.Value
	fail := func(what string, err error) {
		n.errors.Add(1)
		lastErr.Store(what + ": " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var wg sync.WaitGroup
	loop := func(workers int, f func()) {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					f()
				}
			}()
		}
	}
	loop(2, func() {
		var r struct{ StopReason string }
		if err := c.do("POST", "/v1/agents/soak/run", map[string]any{"input": "say hi"}, &r); err != nil || r.StopReason != "complete" {
			fail("run", fmt.Errorf("%v (stop %q)", err, r.StopReason))
			return
		}
		n.runs.Add(1)
	})
	loop(2, func() {
		var r struct {
			ExitCode int
			Stdout   string
		}
		if err := c.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "echo soak"}, &r); err != nil || r.Stdout != "soak\n" {
			fail("exec", fmt.Errorf("%v %+v", err, r))
			return
		}
		n.execs.Add(1)
	})
	loop(1, func() {
		if err := fileRound(c, m.ID); err != nil {
			fail("files", err)
			return
		}
		n.files.Add(1)
	})
	loop(2, func() {
		if err := eventSocket(ctx, base); err != nil && ctx.Err() == nil {
			fail("events", err)
			return
		}
		n.sockets.Add(1)
	})
	loop(8, func() {
		if err := slowClient(base); err != nil && ctx.Err() == nil {
			fail("slow client", err)
			return
		}
		n.slow.Add(1)
	})

	fmt.Printf("%-8s %8s %8s %5s %10s %7s %6s %6s %6s %6s %6s\n", "t", "rss MB", "threads", "fds", "goroutines", "runs", "execs", "files", "socks", "slow", "errors")
	sample := func(t time.Duration) {
		rss, threads := procStatus(srv.Process.Pid)
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", srv.Process.Pid))
		fmt.Printf("%-8s %8.1f %8d %5d %10s %7d %6d %6d %6d %6d %6d\n", t.Round(time.Second), float64(rss)/1024, threads, len(fds),
			goroutines(c), n.runs.Load(), n.execs.Load(), n.files.Load(), n.sockets.Load(), n.slow.Load(), n.errors.Load())
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			sample(time.Since(start))
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	time.Sleep(10 * time.Second) // let the server settle before the last sample
	fmt.Println("after the load stopped:")
	sample(time.Since(start))
	if v := lastErr.Load(); v != nil {
		fmt.Println("last error:", v)
	}
	// Every machine goes, the agents' too: machines outlive a server by design (the next one adopts
	// them), and the soak's data directory is about to be deleted.
	var all struct{ Computers []struct{ ID string } }
	c.do("GET", "/v1/computers?all=true", nil, &all)
	for _, it := range all.Computers {
		c.do("DELETE", "/v1/computers/"+it.ID, nil, nil)
	}
	srv.Process.Signal(os.Interrupt)
	srv.Wait()
	if n.errors.Load() > 0 {
		return fmt.Errorf("%d errors", n.errors.Load())
	}
	return nil
}

// scriptedModel answers chat completions like an OpenAI-compatible server: a shell call first, then text.
func scriptedModel(w http.ResponseWriter, r *http.Request) {
	if r.Method == "GET" {
		io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"}]}`)
		return
	}
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	delta := `{"role":"assistant","content":"done"}`
	finish := "stop"
	if !bytes.Contains(b, []byte(`"role":"tool"`)) {
		delta = `{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"shell","arguments":"{\"command\":\"echo hi\"}"}}]}`
		finish = "tool_calls"
	}
	fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta)
	fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%q}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":5,\"total_tokens\":25}}\n\ndata: [DONE]\n\n", finish)
}

type client struct {
	base string
	http *http.Client
}

func (c *client) do(method, path string, body, into any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if into != nil {
		if bb, ok := into.(*[]byte); ok {
			*bb = b
			return nil
		}
		return json.Unmarshal(b, into)
	}
	return nil
}

// fileRound writes 1 MB, reads it back, uploads a small tree and downloads it.
func fileRound(c *client, id string) error {
	data := make([]byte, 1<<20)
	rand.Read(data)
	if err := c.do("PUT", "/v1/computers/"+id+"/fs/write?path=blob.bin", data, nil); err != nil {
		return err
	}
	var got []byte
	if err := c.do("GET", "/v1/computers/"+id+"/fs/read?path=blob.bin", nil, &got); err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("read back %d bytes that differ", len(got))
	}
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	for i := range 20 {
		body := []byte(strings.Repeat("x", 1000))
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("tree/f%d.txt", i), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write(body)
	}
	tw.Close()
	zw.Close()
	if err := c.do("POST", "/v1/computers/"+id+"/fs/upload?path=/work/up", tgz.Bytes(), nil); err != nil {
		return err
	}
	var dl []byte
	return c.do("GET", "/v1/computers/"+id+"/fs/download?path=/work/up/tree", nil, &dl)
}

// eventSocket opens WS /v1/events, subscribes to every topic, reads frames for 5 s and closes.
func eventSocket(ctx context.Context, base string) error {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	key := make([]byte, 16)
	rand.Read(key)
	fmt.Fprintf(conn, "GET /v1/events HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		strings.TrimPrefix(base, "http://"), base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, "101") {
		return fmt.Errorf("events upgrade: %q %v", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			break
		}
	}
	writeFrame(conn, []byte(`{"type":"subscribe","topics":["computers","runs","providers","triggers","reaper"]}`))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	frames := 0
	for ctx.Err() == nil {
		if _, err := readFrame(br); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				break
			}
			return err
		}
		frames++
	}
	if frames == 0 {
		return fmt.Errorf("no hello frame on the events socket")
	}
	return nil
}

func writeFrame(w io.Writer, p []byte) {
	mask := []byte{1, 2, 3, 4}
	hdr := []byte{0x81, 0x80 | byte(len(p))}
	if len(p) >= 126 {
		hdr = []byte{0x81, 0x80 | 126, byte(len(p) >> 8), byte(len(p))}
	}
	out := append(hdr, mask...)
	for i, b := range p {
		out = append(out, b^mask[i%4])
	}
	w.Write(out)
}

func readFrame(br *bufio.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return nil, err
		}
		n = uint64(e[0])<<8 | uint64(e[1])
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return nil, err
		}
		n = 0
		for _, b := range e {
			n = n<<8 | uint64(b)
		}
	}
	p := make([]byte, n)
	_, err := io.ReadFull(br, p)
	return p, err
}

// slowClient sends a POST whose body trickles a byte a second: the server must end it (408 or a close)
// well before the body would be complete.
func slowClient(base string) error {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/agents/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		if _, err := conn.Write([]byte(" ")); err != nil {
			return nil // closed by the server: what we want
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 512)
		if n, err := conn.Read(b); n > 0 || (err != nil && !isTimeout(err)) {
			return nil // answered (408) or closed
		}
	}
	return fmt.Errorf("a body trickling a byte a second was still being read after 60 s")
}

func isTimeout(err error) bool { ne, ok := err.(net.Error); return ok && ne.Timeout() }

// goroutines reads the server's go_goroutines gauge from GET /metrics ("-" when the server has none).
func goroutines(c *client) string {
	var body []byte
	if err := c.do("GET", "/metrics", nil, &body); err != nil {
		return "-"
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "-"
}

func procStatus(pid int) (rssKB, threads int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rssKB, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "Threads:" {
			threads, _ = strconv.Atoi(f[1])
		}
	}
	return
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 17377
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
