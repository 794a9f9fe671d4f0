package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

type noWait struct{}

func (noWait) Wait() error { return nil }

// inProcessChannel connects a host-side execChannel to a helper served in this process (its "machine"
// is this host: 127.0.0.1 inside is the host's loopback).
func inProcessChannel(t testing.TB) *execChannel {
	t.Helper()
	toHelper, in := io.Pipe()
	out, fromHelper := io.Pipe()
	served := make(chan error, 1)
	dir := t.TempDir()
	go func() { served <- serveHelper(toHelper, fromHelper, dir+"/pid-"); fromHelper.Close() }()
	ctx, kill := context.WithCancel(context.Background())
	ch := newExecChannel(ctx, "cmp_test", noWait{}, kill, in)
	br := bufio.NewReader(out)
	if _, kind, _, err := readFrame(br); err != nil || kind != frameHello {
		t.Fatalf("hello: %c %v", kind, err)
	}
	go ch.read(br)
	t.Cleanup(func() {
		ch.close()
		toHelper.Close()
		if err := <-served; err != nil {
			t.Errorf("helper: %v", err)
		}
	})
	return ch
}

// freePort is a loopback port nothing listens on (just now).
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestChannelStreams: a stream opened by the host reaches a port "inside" and carries more than a window
// each way intact; a port where nothing listens says so; streams end with their channel.
func TestChannelStreams(t *testing.T) {
	ch := inProcessChannel(t)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	st, err := ch.dial(context.Background(), echo.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3*chanWindow+12345)
	rand.Read(data)
	go func() { st.Write(data); st.CloseWrite() }()
	got, err := io.ReadAll(st)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echoed %d of %d bytes (equal=%v), err %v", len(got), len(data), bytes.Equal(got, data), err)
	}
	st.Close()
	if _, err := ch.dial(context.Background(), freePort(t)); err == nil || !strings.Contains(err.Error(), "nothing answers") {
		t.Fatalf("dial to a closed port: %v", err)
	}
	// A stream in flight when the channel ends reads EOF and refuses writes.
	hold, err := ch.dial(context.Background(), echo.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	ch.close()
	if _, err := io.ReadAll(hold); err != nil {
		t.Fatalf("read after the channel ended: %v", err)
	}
	if _, err := hold.Write([]byte("x")); err == nil {
		t.Fatal("a write to a stream of an ended channel succeeded")
	}
}

// TestEgressProxyInProcess: the proxy the helper's listen port leads to applies the policy (plain HTTP
// and CONNECT), answers refusals with 403 and why, and publishes them.
func TestEgressProxyInProcess(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	ch := inProcessChannel(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain-ok "+r.URL.Path) }))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls-ok") }))
	defer tlsSrv.Close()
	port := freePort(t)
	np := netPolicy{mode: "egress", allow: []string{"127.0.0.1"}}
	if err := ch.listen(port, func(st *chanStream) { e.s.computers.serveEgress(ch.ctx, "cmp_test", np, st) }); err != nil {
		t.Fatal(err)
	}
	proxy, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(proxy)
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	get := func(u string) (int, string) {
		t.Helper()
		var resp *http.Response
		var err error
		eventually(t, "the proxy port to accept", func() bool {
			resp, err = client.Get(u)
			return err == nil || !strings.Contains(err.Error(), "connection refused")
		})
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(plain.URL + "/a"); code != 200 || body != "plain-ok /a" {
		t.Fatalf("plain HTTP through the proxy: %d %q", code, body)
	}
	if code, body := get(tlsSrv.URL); code != 200 || body != "tls-ok" {
		t.Fatalf("CONNECT through the proxy: %d %q", code, body)
	}
	localhostURL := strings.Replace(plain.URL, "127.0.0.1", "localhost", 1) // allow names 127.0.0.1, not localhost
	if code, body := get(localhostURL); code != 403 || !strings.Contains(body, "not in computer.network.allow") {
		t.Fatalf("a host outside allow: %d %q", code, body)
	}
	evs, _ := e.s.hub.history()
	found := false
	for _, ev := range evs {
		if p, ok := ev.Payload.(map[string]any); ok && ev.Type == "egress_refused" && p["host"] == "localhost" && p["computerId"] == "cmp_test" {
			found = true
		}
	}
	if !found {
		t.Fatal("no egress_refused event for localhost")
	}
}

// BenchmarkEgressProxy: a GET of a small and of an 8 MiB body from a loopback server, straight and
// through the egress proxy over an in-process channel (the stream layer and the proxy, without the
// engine's exec pipe). A new connection per request, as the proxy serves one request per connection.
func BenchmarkEgressProxy(b *testing.B) {
	e := newTestServer(b, withHostEnv)
	ch := inProcessChannel(b)
	big := bytes.Repeat([]byte("x"), 8<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(big)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	port := freePort(b)
	np := netPolicy{mode: "egress", allow: []string{"127.0.0.1"}}
	if err := ch.listen(port, func(st *chanStream) { e.s.computers.serveEgress(ch.ctx, "cmp_bench", np, st) }); err != nil {
		b.Fatal(err)
	}
	proxy, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	for _, via := range []string{"direct", "proxy"} {
		tr := &http.Transport{DisableKeepAlives: true}
		if via == "proxy" {
			tr.Proxy = http.ProxyURL(proxy)
		}
		client := &http.Client{Transport: tr}
		get := func(b *testing.B, path string) {
			resp, err := client.Get(srv.URL + path)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		eventually(b, "the proxy port to accept", func() bool { // the helper listens asynchronously
			resp, err := client.Get(srv.URL + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		b.Run(via+"/small", func(b *testing.B) {
			for b.Loop() {
				get(b, "/")
			}
		})
		b.Run(via+"/8MiB", func(b *testing.B) {
			b.SetBytes(int64(len(big)))
			for b.Loop() {
				get(b, "/big")
			}
		})
	}
}
