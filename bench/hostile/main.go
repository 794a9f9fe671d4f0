// Command hostile measures agentd under the two hostile loads of issue 25, for one or more binaries in
// the same run (say the main branch's and a fix's):
//
//   - stalled streams: 50 `exec/stream` clients running `yes` that never read, plus 200 event WebSockets
//     that never read; the server's RSS is sampled (from /proc) for -stall seconds;
//
//   - descriptor limit: the server started under `ulimit -n 256` (soft and hard); 300 unauthenticated
//     clients that send their headers and hold the body back, then 300 authenticated clients trickling a
//     body one byte a second; /health's latency is measured before and under each.
//
//     go build -o /tmp/agentd-main . (on main) && go build -o /tmp/agentd-new . (on the fix)
//     cd bench/hostile && go run . -stall 60s /tmp/agentd-main /tmp/agentd-new
//
// Linux only (/proc, sh's ulimit). It starts each server in a temporary home and stops it.
package main

import (
	"bufio"
	"bytes"
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
	"time"
)

const token = "hostile-bench-token-0123456789"

func main() {
	stall := flag.Duration("stall", 60*time.Second, "how long the stalled clients are held")
	flag.Parse()
	for _, bin := range flag.Args() {
		fmt.Printf("== %s\n", bin)
		if err := stalled(bin, *stall); err != nil {
			fmt.Println("stalled streams:", err)
		}
		if err := descriptors(bin); err != nil {
			fmt.Println("descriptor limit:", err)
		}
	}
}

type server struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

// start runs `bin serve` under sh with a shell prefix (a ulimit), and waits for its address.
func start(bin, prefix string) (*server, error) {
	dir, err := os.MkdirTemp("", "agentd-hostile-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("sh", "-c", prefix+`exec "$0" serve --port 0 --log-level warn`, bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "AGENT_HOME=" + filepath.Join(dir, "home"),
		"AGENT_TOKEN=" + token, "OLLAMA_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_BASE_URL=http://127.0.0.1:1"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " listening on http://"); ok {
				addr <- strings.TrimSpace(a)
			}
		}
	}()
	select {
	case a := <-addr:
		return &server{cmd: cmd, addr: a, dir: dir}, nil
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("the server did not start")
	}
}

func (s *server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	os.RemoveAll(s.dir)
}

func (s *server) rssMB() float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func (s *server) dial(smallBuffer bool) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err == nil && smallBuffer {
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
	}
	return c, err
}

// health times one GET /health on a new connection (30 s at most).
func (s *server) health() (time.Duration, error) {
	t0 := time.Now()
	c, err := net.DialTimeout("tcp", s.addr, 30*time.Second)
	if err != nil {
		return time.Since(t0), err
	}
	defer c.Close()
	c.SetDeadline(t0.Add(30 * time.Second))
	fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", s.addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
	}
	return time.Since(t0), err
}

func stalled(bin string, hold time.Duration) error {
	s, err := start(bin, "")
	if err != nil {
		return err
	}
	defer s.stop()
	body, _ := json.Marshal(map[string]any{"provider": "local"})
	req, _ := http.NewRequest("POST", "http://"+s.addr+"/v1/computers", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	var m struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m.ID == "" {
		return fmt.Errorf("create: %s", resp.Status)
	}
	before := s.rssMB()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	execBody := `{"cmd":"yes","timeoutSec":600}`
	for range 50 {
		c, err := s.dial(true)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/computers/%s/exec/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", m.ID, s.addr, token, len(execBody), execBody)
	}
	for range 200 {
		c, err := s.dial(true)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"+
			"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", s.addr, token)
	}
	peak := 0.0
	var samples []string
	for t0 := time.Now(); time.Since(t0) < hold; {
		time.Sleep(5 * time.Second) // a sampling interval
		r := s.rssMB()
		peak = max(peak, r)
		samples = append(samples, fmt.Sprintf("%.0f", r))
	}
	fmt.Printf("stalled streams: RSS %.0f MB before, peak %.0f MB, at the end %.0f MB over %s (every 5 s: %s)\n",
		before, peak, s.rssMB(), hold, strings.Join(samples, " "))
	return nil
}

func descriptors(bin string) error {
	s, err := start(bin, "ulimit -n 256 && ")
	if err != nil {
		return err
	}
	defer s.stop()
	report := func(what string) {
		var ds []string
		for range 5 {
			d, err := s.health()
			if err != nil {
				ds = append(ds, fmt.Sprintf("failed after %.1f s (%v)", d.Seconds(), err))
				continue
			}
			ds = append(ds, fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000))
		}
		fmt.Printf("descriptor limit 256, %s: /health %s\n", what, strings.Join(ds, ", "))
	}
	report("idle")
	for _, kind := range []struct {
		name, head string
		trickle    bool
	}{
		{"300 unauthenticated clients holding their body back", "POST /v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", false},
		{"300 authenticated clients trickling a body", "POST /v1/agents/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", true},
	} {
		var conns []net.Conn
		stop := make(chan struct{})
		for range 300 {
			c, err := s.dial(false)
			if err != nil {
				return err
			}
			c.Write([]byte(kind.head))
			conns = append(conns, c)
			if kind.trickle {
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Second): // the trickle
						}
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}()
			}
			go io.Copy(io.Discard, c)
		}
		report(kind.name)
		close(stop)
		for _, c := range conns {
			c.Close()
		}
	}
	return nil
}
