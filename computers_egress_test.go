//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// The "outside" host of the egress tests: a network namespace this test makes, joined to the host by a
// veth pair in 10.231.7.0/30 (the host 10.231.7.1, the outside 10.231.7.2). Only it and loopback are ever
// targets: the tests reach no other address.
const (
	outsideHostIP = "10.231.7.1"
	outsideIP     = "10.231.7.2"
)

// outsideServer starts an HTTP server answering "outside-ok" on 10.231.7.2 in a namespace of its own and
// returns its port. It skips without root or `ip`.
func outsideServer(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the egress tests make a network namespace and a veth pair: they need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the egress tests need iproute2's `ip` (apt-get install iproute2)")
	}
	ns := fmt.Sprintf("agentd-eg-%d", os.Getpid())
	hostIf, nsIf := fmt.Sprintf("agh%d", os.Getpid()%100000), fmt.Sprintf("agn%d", os.Getpid()%100000)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", ns).Run() // a previous run of this pid's leftovers
	run("netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	run("link", "set", nsIf, "netns", ns)
	run("addr", "add", outsideHostIP+"/30", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", ns, "addr", "add", outsideIP+"/30", "dev", nsIf)
	run("-n", ns, "link", "set", nsIf, "up")
	run("-n", ns, "link", "set", "lo", "up")

	// The listener is made by a thread that joined the namespace (and is never given back to the
	// runtime: the goroutine ends with it locked, so the thread ends too); the socket stays there.
	type res struct {
		ln  net.Listener
		err error
	}
	setns, ok := map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "386": 346, "ppc64le": 350, "s390x": 339}[runtime.GOARCH]
	if !ok {
		t.Skip("setns's number is not known here for " + runtime.GOARCH)
	}
	got := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			got <- res{err: err}
			return
		}
		defer f.Close()
		if _, _, e := syscall.RawSyscall(setns, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
			got <- res{err: fmt.Errorf("setns: %v", e)}
			return
		}
		ln, err := net.Listen("tcp", outsideIP+":0")
		got <- res{ln, err}
	}()
	r := <-got
	if r.err != nil {
		t.Fatalf("the outside server: %v", r.err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprint(w, "outside-ok")
	})}
	go srv.Serve(r.ln)
	t.Cleanup(func() { srv.Close() })
	return r.ln.Addr().(*net.TCPAddr).Port
}

// fetchPy fetches a URL with python3's urllib (which honours the proxy variables) and prints
// "<status> <body>" or "ERR <why>".
const fetchPy = `import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10); print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print("ERR", e)`

// rawPy connects straight to host:port (no proxy) and prints CONNECTED or ERR.
const rawPy = `import sys, socket
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print("CONNECTED")
except Exception as e:
    print("ERR", e)`

func pyRun(e *testServer, id, script string, args ...string) string {
	e.t.Helper()
	r := e.exec(id, map[string]any{"cmd": append([]string{"python3", "-c", script}, args...), "timeoutSec": 60})
	return strings.TrimSpace(r.Stdout + r.Stderr)
}

// TestEgressEnforced: an egress machine reaches the outside only through agentd's filtering proxy, which
// applies the machine's network policy; raw TCP has no route; none reaches nothing; refusals are events.
func TestEgressEnforced(t *testing.T) {
	port := outsideServer(t)
	target := fmt.Sprintf("http://%s:%d/", outsideIP, port)
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host-loopback") }))
	defer local.Close()
	_, localPort, _ := net.SplitHostPort(local.Listener.Addr().String())
	if out, err := exec.Command("python3", "-c", fetchPy, target).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "200 outside-ok") {
		t.Fatalf("the host itself cannot reach the outside server: %v %s", err, out)
	}
	for _, prov := range []string{"docker", "podman", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			if os.Getenv("AGENT_TEST_CHANNEL") == "0" {
				t.Skip("egress goes through the exec channel, off here (AGENT_TEST_CHANNEL=0): TestEgressFailsClosed covers that")
			}
			e := newTestServer(t, withHostEnv, func(c *testSetup) { c.MaxComputers = 6 })
			net := func(mode string, allow ...string) map[string]any {
				return map[string]any{"mode": mode, "allow": append([]string{}, allow...)}
			}
			allowed := e.create(map[string]any{"provider": prov, "network": net("egress", outsideIP)})
			other := e.create(map[string]any{"provider": prov, "network": net("egress", "example.invalid")})
			open := e.create(map[string]any{"provider": prov, "network": net("egress")})
			none := e.create(map[string]any{"provider": prov, "network": net("none")})

			if out := pyRun(e, allowed.ID, fetchPy, target); out != "200 outside-ok" {
				t.Fatalf("egress with the outside allowed, through the proxy: %q", out)
			}
			if out := pyRun(e, allowed.ID, rawPy, outsideIP, fmt.Sprint(port)); !strings.HasPrefix(out, "ERR") {
				t.Fatalf("raw TCP from an egress machine: %q", out)
			}
			r := e.exec(other.ID, map[string]any{"cmd": []string{"python3", "-c", fetchPy, target}, "timeoutSec": 60})
			if out := strings.TrimSpace(r.Stdout); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "not in computer.network.allow") {
				t.Fatalf("egress with another allow list: %q", out)
			}
			if want := fmt.Sprintf("agentd: the egress proxy refused %s:%d: refused: host %s is not in computer.network.allow\n", outsideIP, port, outsideIP); r.Stderr != want {
				t.Fatalf("the exec's stderr does not end with the refusal: %q, want %q", r.Stderr, want)
			}
			if out := pyRun(e, open.ID, fetchPy, target); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "private") {
				t.Fatalf("egress to a private address not allowed: %q", out)
			}
			// The host's loopback: no route straight (the sandbox no longer shares the host's network),
			// and refused by the proxy when asked through it.
			if out := pyRun(e, open.ID, rawPy, "127.0.0.1", localPort); !strings.HasPrefix(out, "ERR") {
				t.Fatalf("an egress machine reached the host's 127.0.0.1:%s: %q", localPort, out)
			}
			viaProxy := e.exec(open.ID, map[string]any{"cmd": []string{"python3", "-c", fetchPy, local.URL},
				"env": map[string]string{"NO_PROXY": "", "no_proxy": ""}, "timeoutSec": 60})
			if out := strings.TrimSpace(viaProxy.Stdout); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "loopback") {
				t.Fatalf("the host's loopback through the proxy: %q %s", out, viaProxy.Stderr)
			}
			if prov == "sandbox" { // the host's curl is there: a refusal as a user sees it
				r := e.exec(open.ID, map[string]any{"cmd": "curl -sS " + target, "timeoutSec": 60})
				if !strings.Contains(r.Stdout, "agentd egress proxy: refused") {
					t.Fatalf("curl through the proxy: %+v", r)
				}
			}
			for _, what := range []string{fetchPy, rawPy} {
				args := []string{target}
				if what == rawPy {
					args = []string{outsideIP, fmt.Sprint(port)}
				}
				if out := pyRun(e, none.ID, what, args...); !strings.HasPrefix(out, "ERR") {
					t.Fatalf("network none reached the outside: %q", out)
				}
			}
			refused := map[string]bool{}
			evs, _ := e.s.hub.history()
			for _, ev := range evs {
				if p, ok := ev.Payload.(map[string]any); ok && ev.Topic == "computers" && ev.Type == "egress_refused" {
					refused[fmt.Sprint(p["computerId"], " ", p["host"])] = true
				}
			}
			for _, want := range []string{other.ID + " " + outsideIP, open.ID + " " + outsideIP, open.ID + " 127.0.0.1"} {
				if !refused[want] {
					t.Fatalf("no egress_refused event for %s: %v", want, refused)
				}
			}
			for _, m := range []ComputerInfo{allowed, other, open, none} {
				e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			}
		})
	}
	t.Cleanup(func() { checkNoLeaks(t) })
}

// tlsThroughProxyPy opens a CONNECT tunnel to host:port through the machine's proxy and starts TLS in
// it with the given server name; it prints how the handshake ended.
const tlsThroughProxyPy = `import sys, socket, ssl
h, p, name = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(("CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n" % (h, p, h, p)).encode())
r = s.recv(4096)
if not r.startswith(b"HTTP/1.1 200"):
    print("NOCONNECT", r[:60]); sys.exit()
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(s, server_hostname=name or None); print("HANDSHAKE")
except ssl.SSLError as e:
    print("SSL", e.reason)
except Exception as e:
    print("ERR", type(e).__name__)`

// TestEgressSNIChecked: a CONNECT to an allowed host cannot carry a TLS session for a name the policy
// refuses (domain fronting): the tunnel ends before the hello reaches the upstream, with an event. A
// hello without a name, or not TLS at all, passes.
func TestEgressSNIChecked(t *testing.T) {
	port := outsideServer(t) // plain HTTP: a hello that reaches it gets an HTTP 400, "wrong version number"
	for _, prov := range []string{"docker", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			if os.Getenv("AGENT_TEST_CHANNEL") == "0" {
				t.Skip("egress goes through the exec channel, off here (AGENT_TEST_CHANNEL=0)")
			}
			e := newTestServer(t, withHostEnv)
			m := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "egress", "allow": []string{outsideIP}}})
			if out := pyRun(e, m.ID, tlsThroughProxyPy, outsideIP, fmt.Sprint(port), ""); !strings.Contains(out, "WRONG_VERSION_NUMBER") && !strings.Contains(out, "RECORD_LAYER") {
				t.Fatalf("a hello without a name did not reach the allowed host: %q", out)
			}
			out := pyRun(e, m.ID, tlsThroughProxyPy, outsideIP, fmt.Sprint(port), "evil.example")
			if strings.Contains(out, "WRONG_VERSION_NUMBER") || strings.Contains(out, "HANDSHAKE") {
				t.Fatalf("a hello for a refused name reached the upstream: %q", out)
			}
			eventually(t, "the egress_refused event naming the TLS server name", func() bool {
				evs, _ := e.s.hub.history()
				for _, ev := range evs {
					if p, ok := ev.Payload.(map[string]any); ok && ev.Type == "egress_refused" && p["computerId"] == m.ID &&
						strings.Contains(fmt.Sprint(p["reason"]), `TLS server name "evil.example"`) {
						return true
					}
				}
				return false
			})
			e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		})
	}
}

// TestEgressFailsClosed: with the exec channel off, an egress machine on docker or podman has no proxy
// and no network at all, and its ports answer why.
func TestEgressFailsClosed(t *testing.T) {
	for _, prov := range []string{"docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			e := newTestServer(t, withHostEnv, func(c *testSetup) { c.ExecChannel = new(bool); c.helperBinary = "" })
			m := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "egress"}})
			out := e.sh(m.ID, `for f in /sys/class/net/*; do basename "$f"; done; echo "proxy=$HTTP_PROXY"`)
			if out != "lo\nproxy=http://127.0.0.1:3128\n" {
				t.Fatalf("an egress machine without the channel has more than loopback: %q", out)
			}
			if got := pyRun(e, m.ID, rawPy, "127.0.0.1", "3128"); !strings.HasPrefix(got, "ERR") {
				t.Fatalf("something answers on the proxy's port without the channel: %q", got)
			}
			env := e.wantError("POST", "/v1/computers/"+m.ID+"/ports", map[string]any{"port": 8000}, 500, codeComputerFailed)
			if msg := env["message"].(string); !strings.Contains(msg, "exec channel") {
				t.Fatalf("ports of an egress machine without the channel: %v", env)
			}
			e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		})
	}
}

// TestFullModeFiltered: full keeps the bridge (the outside host is reached straight), but deny binds
// commands too, and the host's own address on the bridge (its gateway) is never reachable.
func TestFullModeFiltered(t *testing.T) {
	port := outsideServer(t)
	if !fullFilterable() {
		t.Skip("full-mode filtering needs root and iptables")
	}
	for _, prov := range []string{"docker", "podman", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			e := newTestServer(t, withHostEnv)
			open := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "full"}})
			denied := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "full", "deny": []string{outsideIP}}})
			if out := pyRun(e, open.ID, rawPy, outsideIP, fmt.Sprint(port)); out != "CONNECTED" {
				t.Fatalf("full without deny cannot reach the outside host: %q", out)
			}
			if out := pyRun(e, denied.ID, rawPy, outsideIP, fmt.Sprint(port)); !strings.HasPrefix(out, "ERR") {
				t.Fatalf("full with the outside host in deny reached it: %q", out)
			}
			var gw []byte
			var err error
			if prov == "sandbox" { // the host's end of the machine's veth pair: its address's .1
				sb := e.s.computers.providerByName("sandbox").(*sandboxProvider)
				ip := net.ParseIP(sb.guestNetAddr(context.Background(), &open)).To4()
				if ip == nil {
					t.Fatal("a full sandbox has no address of its own")
				}
				ip[3]--
				gw = []byte(ip.String())
				// Nor does it reach the host's loopback, or the other machine.
				lo, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer lo.Close()
				_, loPort, _ := net.SplitHostPort(lo.Addr().String())
				if out := pyRun(e, open.ID, rawPy, "127.0.0.1", loPort); !strings.HasPrefix(out, "ERR") {
					t.Fatalf("a full sandbox reached the host's 127.0.0.1:%s: %q", loPort, out)
				}
				e.sh(denied.ID, "nohup python3 -m http.server 8001 --bind 0.0.0.0 >/dev/null 2>&1 &")
				other := sb.guestNetAddr(context.Background(), &denied)
				eventually(t, "the other machine's server, from itself", func() bool {
					return pyRun(e, denied.ID, rawPy, other, "8001") == "CONNECTED"
				})
				if out := pyRun(e, open.ID, rawPy, other, "8001"); !strings.HasPrefix(out, "ERR") {
					t.Fatalf("a full sandbox reached another machine at %s: %q", other, out)
				}
			} else {
				gw, err = exec.Command(prov, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.Gateway}} {{end}}", "agentd-"+open.ID).Output()
			}
			if err != nil || net.ParseIP(strings.Fields(string(gw) + " x")[0]) == nil {
				t.Fatalf("the bridge gateway: %v %q", err, gw)
			}
			ln, err := net.Listen("tcp", strings.Fields(string(gw))[0]+":0") // the host's own address on the bridge
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			closeEach(ln)
			host, hport, _ := net.SplitHostPort(ln.Addr().String())
			if out := pyRun(e, open.ID, rawPy, host, hport); !strings.HasPrefix(out, "ERR") {
				t.Fatalf("a full machine reached the host on its bridge gateway %s: %q", ln.Addr(), out)
			}
			// No IPv6 path: the machine has no IPv6 address but loopback's, and the host's addresses,
			// the link-local ones of the machine's gateway interface included, do not answer on [::].
			if out := e.sh(open.ID, "grep -v ' lo$' /proc/net/if_inet6 || true"); out != "" {
				t.Fatalf("a full machine has IPv6 addresses: %q", out)
			}
			if targets := hostV6Targets(t, strings.Fields(string(gw))[0]); len(targets) > 0 {
				port := v6Port(t)
				for _, a := range targets {
					if out := pyRun(e, open.ID, rawPy, a, port); !strings.HasPrefix(out, "ERR") {
						t.Fatalf("a full machine reached the host's [%s]:%s: %q", a, port, out)
					}
				}
			}
			// Nor another engine's container (a machine of another provider), either way for the sandbox.
			foreign := map[string]string{"docker": "podman", "podman": "docker", "sandbox": "docker"}[prov]
			if engineTested(foreign) {
				fip, stopForeign := foreignServer(t, foreign, prov)
				defer stopForeign()
				if out := pyRun(e, open.ID, rawPy, fip, "8000"); !strings.HasPrefix(out, "ERR") {
					t.Fatalf("a full %s machine reached a %s container at %s: %q", prov, foreign, fip, out)
				}
				if prov == "sandbox" {
					other := e.s.computers.providerByName("sandbox").(*sandboxProvider).guestNetAddr(context.Background(), &denied)
					out, _ := exec.Command(foreign, "exec", "agentd-foreign-"+testOwnerPrefix()+prov, "python3", "-c", rawPy, other, "8001").CombinedOutput()
					if !strings.HasPrefix(string(out), "ERR") {
						t.Fatalf("a %s container reached a full sandbox at %s: %q", foreign, other, out)
					}
				}
			}
			// A port forward still works: the host opens, the machine only answers.
			e.sh(open.ID, "mkdir -p www && echo full-ok > www/i && cd www && nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &")
			var b PortBinding
			e.call("POST", "/v1/computers/"+open.ID+"/ports", map[string]any{"port": 8000}, 200, &b)
			eventually(t, "the full machine's port through its binding", func() bool {
				resp, err := http.Get(b.URL + "/i")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == 200
			})
			for _, m := range []ComputerInfo{open, denied} {
				e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
				for _, table := range []string{"filter", "nat"} {
					if out, _ := exec.Command("iptables", "-w", "-t", table, "-S").Output(); strings.Contains(string(out), "agentd:"+m.ID) {
						t.Fatalf("the %s rules of %s outlived it", table, m.ID)
					}
				}
				if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), m.ID) {
					t.Fatalf("the network namespace of %s outlived it", m.ID)
				}
			}
		})
	}
}

// closeEach accepts ln's connections and closes each at once, until ln is closed.
func closeEach(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// v6Port is the port of a listener on the host's [::] for the test (closed at its cleanup).
func v6Port(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		t.Fatalf("the host has IPv6 addresses but cannot listen on [::]: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	closeEach(ln)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// hostV6Targets are the host's IPv6 addresses a machine behind gw could aim at: the link-local ones of
// the interface holding gw (scoped to the machine's eth0), and every global one.
func hostV6Targets(t *testing.T, gw string) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		onGW := false
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.String() == gw {
				onGW = true
			}
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			switch {
			case !ok || n.IP.To4() != nil || n.IP.IsLoopback():
			case n.IP.IsLinkLocalUnicast() && onGW:
				out = append(out, n.IP.String()+"%eth0")
			case n.IP.IsGlobalUnicast():
				out = append(out, n.IP.String())
			}
		}
	}
	return out
}

// engineTested says whether an engine's tests run here (without failing or skipping the caller).
func engineTested(engine string) bool {
	check := map[string][]string{"docker": {"image", "inspect", testImage}, "podman": {"image", "exists", testImage}}[engine]
	return os.Getenv("AGENT_TEST_DOCKER") == "1" && check != nil && exec.Command(engine, check...).Run() == nil
}

// foreignServer runs a plain container of engine (not an agentd machine; one per provider's subtest)
// serving HTTP on 8000 and returns its address, once the host reaches it, and its removal.
func foreignServer(t *testing.T, engine, forProv string) (string, func()) {
	t.Helper()
	name := "agentd-foreign-" + testOwnerPrefix() + forProv
	exec.Command(engine, "rm", "-f", name).Run()
	if out, err := exec.Command(engine, "run", "-d", "--name", name, "--label", "agentd.id=foreign", "--label", "agentd.owner="+testOwnerPrefix()+"foreign",
		testImage, "python3", "-m", "http.server", "8000").CombinedOutput(); err != nil {
		t.Fatalf("%s run: %v: %s", engine, err, out)
	}
	stop := func() {
		if engine == "podman" {
			exec.Command(engine, "rm", "-f", "-t", "0", name).Run()
		} else {
			exec.Command(engine, "rm", "-f", name).Run()
		}
	}
	ip, err := exec.Command(engine, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name).Output()
	if err != nil || len(strings.Fields(string(ip))) == 0 {
		stop()
		t.Fatalf("%s inspect: %v %q", engine, err, ip)
	}
	addr := strings.Fields(string(ip))[0]
	eventually(t, "the "+engine+" container's server from the host", func() bool {
		out, _ := exec.Command("python3", "-c", rawPy, addr, "8000").Output()
		return strings.TrimSpace(string(out)) == "CONNECTED"
	})
	return addr, stop
}

// helloBytes is the ClientHello crypto/tls sends for serverName (its first flight, as written).
func helloBytes(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""}).Handshake()
		a.Close()
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, got, err := clientHelloSNI(b)
	b.Close()
	if err != nil {
		t.Fatalf("the hello for %q: %v", serverName, err)
	}
	return got
}

// tinyRecords is a hello re-cut into handshake records of n bytes each (as a middlebox, or a hostile
// machine, may cut it).
func tinyRecords(hello []byte, n int) []byte {
	var out []byte
	for body := hello[5:]; len(body) > 0; body = body[min(n, len(body)):] {
		out = append(out, tlsRecordHandshake, hello[1], hello[2], 0, byte(min(n, len(body))))
		out = append(out, body[:min(n, len(body))]...)
	}
	return out
}

// TestClientHelloSNI: the name crypto/tls's own ClientHello carries is read whole, fed in any pieces and
// in records split as a middlebox may split them, and no byte after the hello is read; a hello without
// a name has none; a hello cut short and non-hellos are errors.
func TestClientHelloSNI(t *testing.T) {
	for _, name := range []string{"example.com", "a.very.long.name.of.some.host.example.org", ""} {
		hello := helloBytes(t, name)
		for _, feed := range []struct {
			what string
			b    []byte
		}{{"whole", hello}, {"in 7-byte records", tinyRecords(hello, 7)}, {"in 1-byte records", tinyRecords(hello, 1)}} {
			for _, r := range []io.Reader{bytes.NewReader(feed.b), iotest.OneByteReader(bytes.NewReader(append(feed.b, "after"...)))} {
				if sni, read, err := clientHelloSNI(r); err != nil || sni != name || string(read) != string(feed.b) {
					t.Fatalf("%q %s: got %q, read %d bytes of %d, err %v", name, feed.what, sni, len(read), len(feed.b), err)
				}
			}
		}
		for i := 0; i < len(hello); i++ { // every prefix is not (yet) a hello
			if _, _, err := clientHelloSNI(bytes.NewReader(hello[:i])); err == nil {
				t.Fatalf("%q: the %d-byte prefix: no error", name, i)
			}
		}
	}
	for _, b := range [][]byte{[]byte("GET / HTTP/1.1\r\n"), {22, 3, 1, 0, 4, 2, 0, 0, 0}, {22, 3, 1, 0, 0}} {
		if _, _, err := clientHelloSNI(bytes.NewReader(b)); err == nil {
			t.Fatalf("%q: no error", b)
		}
	}
}

// recordingConn is the upstream side of a gate in the tests: what reached it, and whether it was closed.
type recordingConn struct {
	got    []byte
	closed bool
}

func (r *recordingConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (r *recordingConn) Write(p []byte) (int, error) { r.got = append(r.got, p...); return len(p), nil }
func (r *recordingConn) Close() error                { r.closed = true; return nil }
func (r *recordingConn) CloseWrite() error           { return nil }

// TestHelloGate: the gate passes a hello whose name is allowed, and what follows it, untouched; it
// closes the upstream on a refused name before a byte of the hello reaches it; a hello cut into 1-byte
// records and fed a byte at a time is decided all the same, as is one sent early (with the CONNECT);
// what is not TLS passes at once; a hello over 64 KiB is refused.
func TestHelloGate(t *testing.T) {
	for _, name := range []string{"allowed.example", "evil.example"} {
		hello := helloBytes(t, name)
		for _, feed := range []struct {
			what  string
			b     []byte
			step  int
			early int
		}{{"whole", hello, len(hello), 0}, {"byte by byte", hello, 1, 0}, {"tiny records, byte by byte", tinyRecords(hello, 1), 1, 0},
			{"partly early", hello, 1, 20}, {"all early", hello, 1, len(hello)}} {
			up := &recordingConn{}
			var checked []string
			g := &helloGate{halfConn: up, early: feed.b[:feed.early], check: func(sni string) error {
				checked = append(checked, sni)
				if sni != "allowed.example" {
					return errors.New("refused")
				}
				return nil
			}}
			var r io.Reader = bytes.NewReader(append(feed.b[feed.early:len(feed.b):len(feed.b)], "after"...))
			if feed.step == 1 {
				r = iotest.OneByteReader(r)
			}
			_, err := g.ReadFrom(r)
			if len(checked) != 1 || checked[0] != name {
				t.Fatalf("%s, %s: checked %q", name, feed.what, checked)
			}
			if name == "evil.example" {
				if err == nil || !up.closed || len(up.got) != 0 {
					t.Fatalf("%s, %s: err %v, closed %v, %d bytes upstream", name, feed.what, err, up.closed, len(up.got))
				}
				continue
			}
			if err != nil || up.closed || string(up.got) != string(feed.b)+"after" {
				t.Fatalf("%s, %s: err %v, closed %v, upstream got %d bytes of %d", name, feed.what, err, up.closed, len(up.got), len(feed.b)+5)
			}
		}
	}
	up := &recordingConn{}
	g := &helloGate{halfConn: up, check: func(string) error { t.Fatal("checked a non-TLS stream"); return nil }}
	if _, err := g.ReadFrom(bytes.NewReader(nil)); err != nil || len(up.got) != 0 {
		t.Fatalf("nothing sent: %v %q", err, up.got)
	}
	if _, err := g.ReadFrom(bytes.NewReader([]byte("SSH-2.0-x\r\n"))); err != nil || string(up.got) != "SSH-2.0-x\r\n" {
		t.Fatalf("not TLS: %v %q", err, up.got)
	}
	// A handshake record stream that never ends a hello is refused at 64 KiB, not read on.
	big := tinyRecords(append([]byte{tlsRecordHandshake, 3, 1, 0, 0, 1, 0, 0xff, 0xff}, make([]byte, 20<<10)...), 1)
	up = &recordingConn{}
	g = &helloGate{halfConn: up, check: func(string) error { return nil }}
	if n, err := g.ReadFrom(bytes.NewReader(big)); err == nil || !up.closed || len(up.got) != 0 || n != 0 {
		t.Fatalf("an endless hello: %d %v closed %v, %d bytes upstream", n, err, up.closed, len(up.got))
	}
}

func FuzzClientHelloSNI(f *testing.F) {
	hello := helloBytes(f, "example.com")
	f.Add(hello)
	f.Add(tinyRecords(hello, 1))
	f.Add(helloBytes(f, ""))
	f.Add([]byte{22, 3, 1, 0, 5, 1, 0, 0, 1, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		sni, read, err := clientHelloSNI(bytes.NewReader(b))
		if err != nil && sni != "" {
			t.Fatalf("an error with a name: %q %v", sni, err)
		}
		if len(read) > maxHelloBytes || !bytes.HasPrefix(b, read) {
			t.Fatalf("read %d bytes, not a prefix of the input (%d)", len(read), len(b))
		}
		// Read as it arrives, a byte at a time: the same answer, and exactly the hello's bytes. Read whole,
		// crypto/tls may also take bytes that arrived with the hello's last record (the gate forwards
		// every byte it read once the name passes, so that loses nothing): the hello is a prefix of them.
		sniP, readP, errP := clientHelloSNI(iotest.OneByteReader(bytes.NewReader(b)))
		if sniP != sni || (errP == nil) != (err == nil) || (err == nil && !bytes.HasPrefix(read, readP)) {
			t.Fatalf("in pieces: %q %d %v; whole: %q %d %v", sniP, len(readP), errP, sni, len(read), err)
		}
		if err == nil { // more bytes after a whole hello change nothing, and are not read
			sni2, read2, err2 := clientHelloSNI(iotest.OneByteReader(bytes.NewReader(append(b[:len(readP):len(readP)], 0x17, 3, 3, 0, 1, 0))))
			if sni2 != sni || err2 != nil || string(read2) != string(readP) {
				t.Fatalf("trailing bytes changed the answer: %q/%q %v", sni, sni2, err2)
			}
		}
	})
}

// discardHalfConn is an upstream that takes everything and keeps nothing (the gate's benchmark).
type discardHalfConn struct{}

func (discardHalfConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (discardHalfConn) Write(p []byte) (int, error) { return len(p), nil }
func (discardHalfConn) Close() error                { return nil }
func (discardHalfConn) CloseWrite() error           { return nil }

// BenchmarkHelloGate: the CONNECT tunnel's ClientHello check, a hello of crypto/tls fed whole (as a
// client writes it), and the same hello cut into 1-byte records fed a byte at a time (what a hostile
// machine can send: the gate must stay linear in it).
func BenchmarkHelloGate(b *testing.B) {
	hello := helloBytes(b, "example.com")
	for _, c := range []struct {
		name string
		b    []byte
		step int
	}{{"whole", hello, len(hello)}, {"1-byte-records-bytewise", tinyRecords(hello, 1), 1}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.b)))
			for b.Loop() {
				g := &helloGate{halfConn: discardHalfConn{}, check: func(string) error { return nil }}
				var r io.Reader = bytes.NewReader(c.b)
				if c.step == 1 {
					r = iotest.OneByteReader(r)
				}
				if _, err := g.ReadFrom(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Where agentd cannot add full mode's rules (not root, no iptables: a rootless engine), a deny list in
// full is refused with 501 on docker and podman, as on the sandbox, not left to bind only the tools;
// full without deny is still taken.
func TestFullDenyRefusedWhereUnfilterable(t *testing.T) {
	for _, prov := range []string{"docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			e := newTestServer(t, withHostEnv)
			ep := e.s.computers.providerByName(prov).(*engineProvider)
			ep.filterable = func() bool { return false }
			deny := ComputerSpec{Network: NetworkSpec{Mode: "full", Deny: []string{"10.0.0.0/8"}}}
			if err := ep.supports(deny); asAPIError(err).Code != codeNotImplemented || !strings.Contains(err.Error(), "network.deny") {
				t.Fatalf("deny in full, unfilterable: %v", err)
			}
			for _, ok := range []ComputerSpec{{Network: NetworkSpec{Mode: "full"}}, {Network: NetworkSpec{Mode: "egress", Deny: []string{"10.0.0.0/8"}}}} {
				if err := ep.supports(ok); err != nil {
					t.Fatalf("%+v refused: %v", ok.Network, err)
				}
			}
			ep.filterable = func() bool { return true }
			if err := ep.supports(deny); err != nil {
				t.Fatalf("deny in full where it is filtered: %v", err)
			}
			requireProvider(t, prov)
			ep.filterable = func() bool { return false }
			body := map[string]any{"provider": prov, "network": map[string]any{"mode": "full", "deny": []string{"169.254.169.254"}}}
			if msg := e.wantError("POST", "/v1/computers", body, 501, codeNotImplemented)["message"].(string); !strings.Contains(msg, "network.deny") {
				t.Fatalf("the API's refusal: %s", msg)
			}
		})
	}
}

// ownTestIP is the address TestEgressRefusesHostAddresses gives this host, on an interface of its own,
// for the test's duration: a global unicast address in none of IANA's special-purpose ranges (not
// private, loopback, link-local, CGNAT, nor documentation or benchmarking: 203.0.114.0/24 is an
// ordinary allocation, unlike TEST-NET-3 203.0.113.0/24 next to it), so that nothing but its being the
// host's own can refuse it. A /32 on a veth of the test's: only this host's traffic to that one address
// stays here meanwhile.
const ownTestIP = "203.0.114.7"

// ownAddressServer gives the host ownTestIP (a veth pair of the test's, the address on one end) and
// starts an HTTP server answering "host-own" on 0.0.0.0 (a host service as users run them); it returns
// the port. It skips without root or `ip`.
func ownAddressServer(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("this test gives the host an address of its own (a veth pair): it needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("this test needs iproute2's `ip` (apt-get install iproute2)")
	}
	if privateIP(net.ParseIP(ownTestIP)) {
		t.Fatalf("%s is refused as private already: the test would prove nothing", ownTestIP)
	}
	ifA, ifB := fmt.Sprintf("ago%d", os.Getpid()%100000), fmt.Sprintf("agq%d", os.Getpid()%100000)
	exec.Command("ip", "link", "del", ifA).Run() // a previous run of this pid's leftovers
	t.Cleanup(func() { exec.Command("ip", "link", "del", ifA).Run() })
	for _, args := range [][]string{{"link", "add", ifA, "type", "veth", "peer", "name", ifB},
		{"addr", "add", ownTestIP + "/32", "dev", ifA}, {"link", "set", ifA, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host-own") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	if out, err := exec.Command("python3", "-c", fetchPy, fmt.Sprintf("http://%s:%d/", ownTestIP, port)).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "200 host-own") {
		t.Fatalf("the host itself cannot reach its service on %s: %v %s", ownTestIP, err, out)
	}
	return port
}

// TestEgressRefusesHostAddresses (issue 24 item 2): a service of the host's on an address of the host's
// that is neither loopback nor private is refused to egress machines (GET and CONNECT through the
// proxy) and to fetch_url and http_request, unless named in allow. The address is added after the
// server started: nothing is listed once and kept.
func TestEgressRefusesHostAddresses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("this test gives the host an address of its own (a veth pair): it needs root")
	}
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.MaxComputers = 6 })
	port := ownAddressServer(t)
	target := fmt.Sprintf("http://%s:%d/", ownTestIP, port)
	t.Run("tools", func(t *testing.T) {
		for _, tool := range []string{"fetch_url", "http_request"} {
			env, _ := toolHarness(t, nil)
			if out, err := runTool(t, env, tool, map[string]any{"url": target}); asAPIError(err).Code != codeExecDenied || !strings.Contains(err.Error(), "an address of this host") {
				t.Fatalf("%s reached the host's own address: %q %v", tool, out, err)
			}
		}
		env, _ := toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{ownTestIP} })
		if out, err := runTool(t, env, "fetch_url", map[string]any{"url": target}); err != nil || !strings.Contains(out, "host-own") {
			t.Fatalf("fetch_url with the address named in allow: %q %v", out, err)
		}
	})
	for _, prov := range []string{"docker", "podman", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			if os.Getenv("AGENT_TEST_CHANNEL") == "0" {
				t.Skip("egress goes through the exec channel, off here (AGENT_TEST_CHANNEL=0)")
			}
			open := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "egress"}})
			allowed := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "egress", "allow": []string{ownTestIP}}})
			if out := pyRun(e, open.ID, fetchPy, target); !strings.HasPrefix(out, "403 ") || !strings.Contains(out, "an address of this host") {
				t.Fatalf("GET through the proxy to the host's own address: %q", out)
			}
			if out := pyRun(e, open.ID, tlsThroughProxyPy, ownTestIP, fmt.Sprint(port), ""); !strings.HasPrefix(out, "NOCONNECT b'HTTP/1.1 403") {
				t.Fatalf("CONNECT through the proxy to the host's own address: %q", out)
			}
			if out := pyRun(e, allowed.ID, fetchPy, target); out != "200 host-own" {
				t.Fatalf("the host's own address named in allow: %q", out)
			}
			for _, m := range []ComputerInfo{open, allowed} {
				e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			}
		})
	}
}
