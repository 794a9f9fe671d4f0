package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBrowserBenchReport measures the in-machine browser (issue 28) on docker and sandbox — the first
// goto (Chromium's cold start included), warm goto+snapshot p50, and the browser's memory — beside the
// same steps driven directly over CDP on the host's Chromium without agentd, in the same run. Only with
// AGENT_BENCH=1:
//
//	AGENT_BENCH=1 go test -run TestBrowserBenchReport -v -count=1 .
func TestBrowserBenchReport(t *testing.T) {
	if os.Getenv("AGENT_BENCH") != "1" {
		t.Skip("set AGENT_BENCH=1 to measure")
	}
	const n = 20
	p50 := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	for _, prov := range []string{"docker", "sandbox"} {
		requireBrowser(t, prov)
		e := newTestServer(t, withHostEnv, withBrowserImage)
		m := e.create(map[string]any{"provider": prov, "flavor": "browser", "idleTimeoutSec": 0, "memoryMb": 2048})
		serveTestPages(e, m.ID, 8000)
		t0 := time.Now()
		e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "http://localhost:8000/"}, 200, nil)
		cold := time.Since(t0)
		var warm []time.Duration
		for range n {
			t0 = time.Now()
			e.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "http://localhost:8000/"}, 200, nil)
			e.call("POST", "/v1/computers/"+m.ID+"/browser/snapshot", map[string]any{}, 200, nil)
			warm = append(warm, time.Since(t0))
		}
		rss, pss := memoryOf(hostBrowserPids(m.ID))
		t.Logf("agentd %-8s cold goto %v, warm goto+snapshot p50 %v (n=%d), chromium RSS sum %d MB, PSS sum %d MB",
			prov, cold.Round(time.Millisecond), p50(warm).Round(time.Millisecond), n, rss>>10, pss>>10)
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		e.close()
	}

	// Raw CDP: the host's Chromium, the same flags, a page served on the host, no agentd in between.
	dir := t.TempDir()
	for name, body := range browserTestPages {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	srv := exec.Command("python3", "-m", "http.server", "18431", "--bind", "127.0.0.1")
	srv.Dir = dir
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	eventually(t, "the host page server", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:18431")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	page := "http://127.0.0.1:18431/"
	ctx := context.Background()
	t0 := time.Now()
	prof := filepath.Join(dir, "raw")
	m := &ComputerInfo{ID: "raw", Provider: "sandbox", Spec: ComputerSpec{Network: NetworkSpec{Mode: "full"}}}
	cmd := exec.Command("/usr/lib/chromium/chromium", browserFlags(m, prof)...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var port int
	var path string
	eventually(t, "DevToolsActivePort", func() bool {
		b, _ := os.ReadFile(filepath.Join(prof, "profile", "DevToolsActivePort"))
		var ok bool
		port, path, ok = parseDevToolsActivePort(string(b))
		return ok
	})
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	cdp, err := dialCDP(conn, port, path)
	if err != nil {
		t.Fatal(err)
	}
	defer cdp.Close()
	b := &machineBrowser{cdp: cdp}
	if err := b.attach(ctx); err != nil {
		t.Fatal(err)
	}
	gotoRaw := func() {
		loads, stop := cdp.subscribe(b.session, "Page.loadEventFired")
		defer stop()
		if err := cdp.call(ctx, b.session, "Page.navigate", map[string]any{"url": page}, nil); err != nil {
			t.Fatal(err)
		}
		<-loads
	}
	gotoRaw()
	cold := time.Since(t0)
	var warm []time.Duration
	for range n {
		t0 = time.Now()
		gotoRaw()
		if err := cdp.call(ctx, b.session, "Accessibility.getFullAXTree", map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, time.Since(t0))
	}
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if c, err := os.ReadFile(d + "/cmdline"); err == nil && strings.Contains(string(c), "--user-data-dir="+prof+"/profile") {
			pids = append(pids, filepath.Base(d))
		}
	}
	rss, pss := memoryOf(pids)
	t.Logf("raw CDP  host     cold goto %v, warm goto+snapshot p50 %v (n=%d), chromium RSS sum %d MB, PSS sum %d MB",
		cold.Round(time.Millisecond), p50(warm).Round(time.Millisecond), n, rss>>10, pss>>10)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average: %s", strings.TrimSpace(string(load)))
}

// memoryOf sums VmRSS and Pss (kB) over pids.
func memoryOf(pids []string) (rss, pss int) {
	for _, p := range pids {
		for file, key := range map[string]string{"status": "VmRSS:", "smaps_rollup": "Pss:"} {
			f, err := os.Open("/proc/" + p + "/" + file)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == key {
					v, _ := strconv.Atoi(fs[1])
					if key == "VmRSS:" {
						rss += v
					} else {
						pss += v
					}
					break
				}
			}
			f.Close()
		}
	}
	return rss, pss
}
