package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSSEFrames(t *testing.T) {
	sawPing := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w, 5*time.Millisecond)
		s.send(map[string]any{"type": "a"})
		select { // the client tells when a keep-alive arrived between the two events
		case <-sawPing:
		case <-time.After(30 * time.Second):
		}
		s.send(map[string]any{"type": "b"})
		s.fail(errorf(codeModelError, "provider broke").withHint("retry"))
		s.close()
		s.close() // idempotent
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if res.Header.Get(k) != v {
			t.Fatalf("%s = %q", k, res.Header.Get(k))
		}
	}
	var frames []string
	sc := bufio.NewScanner(res.Body)
	var cur []string
	notify := sawPing
	for sc.Scan() {
		if sc.Text() == ": ping" && notify != nil {
			close(notify)
			notify = nil
		}
		if sc.Text() == "" {
			frames = append(frames, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, sc.Text())
	}
	var events []string
	pings := 0
	for _, f := range frames {
		if f == ": ping" {
			pings++
			continue
		}
		events = append(events, f)
	}
	want := []string{
		"id: 1\ndata: {\"type\":\"a\"}",
		"id: 2\ndata: {\"type\":\"b\"}",
		"event: error\ndata: {\"error\":{\"code\":\"E_MODEL_ERROR\",\"message\":\"provider broke\",\"hint\":\"retry\"}}",
		"event: done\ndata: {}",
	}
	if strings.Join(events, "|") != strings.Join(want, "|") {
		t.Fatalf("frames:\n%q\nwant\n%q", events, want)
	}
	if pings == 0 {
		t.Fatal("no keep-alive ping")
	}
}

// A consumer that stops draining is detected: Done fires with errStreamStalled and the producer can abort.
func TestSSEStalledConsumer(t *testing.T) {
	stalled := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w, time.Hour)
		s.stall = 100 * time.Millisecond
		big := strings.Repeat("x", 64<<10)
		for i := 0; i < 100000; i++ {
			if s.send(big) != nil {
				break
			}
		}
		<-s.Done()
		stalled <- s.Err()
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // and never read
	select {
	case err := <-stalled:
		if !errors.Is(err, errStreamStalled) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a consumer that never reads was not detected")
	}
}

// A consumer that disconnects cancels the context bound to the stream, so the work behind it stops.
func TestSSEBindCancelsWhenConsumerLeaves(t *testing.T) {
	cancelled := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w, time.Hour)
		defer s.close()
		ctx, cancel := s.bind(context.Background()) // not r.Context(): only the stream's death may cancel it
		defer cancel()
		for ctx.Err() == nil { // a producer that keeps writing until its consumer is gone
			s.send(map[string]any{"type": "tick", "pad": strings.Repeat("x", 4096)})
		}
		cancelled <- ctx.Err()
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(res.Body).ReadString('\n') // the stream is live
	res.Body.Close()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("bound context ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the bound context was not cancelled after the consumer left")
	}
}

// Concurrent senders (a run's tool calls in parallel) put ids on the wire in increasing order.
func TestSSEIdsInOrderUnderConcurrentSends(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w, time.Hour)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 300; i++ {
					s.send(map[string]any{"g": g})
				}
			}()
		}
		wg.Wait()
		s.close()
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	last, n := 0, 0
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "id: ")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(id)
		if err != nil || v != last+1 {
			t.Fatalf("id %q after %d", id, last)
		}
		last, n = v, n+1
	}
	if n != 8*300 {
		t.Fatalf("%d events", n)
	}
}

// FuzzAppendJSONString: the hand-written encoder used for bulk exec output is valid JSON that decodes
// to what encoding/json's own encoding decodes to, for any bytes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\n\r\t\x00\x1f\x7f", "héllo ✓ 😀", "\xff\xfe bad", "\u2028\u2029", "<&>", "\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := appendJSONString([]byte("x"), s)[1:]
		if !json.Valid(enc) {
			t.Fatalf("not valid JSON: %q", enc)
		}
		var got, want string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatal(err)
		}
		ref, _ := json.Marshal(s)
		json.Unmarshal(ref, &want)
		if got != want {
			t.Fatalf("%q decodes to %q, encoding/json's to %q", s, got, want)
		}
		if b := appendJSONString([]byte("x"), []byte(s))[1:]; string(b) != string(enc) {
			t.Fatalf("%q as bytes encodes to %q, as a string to %q", s, b, enc)
		}
	})
}

// BenchmarkAppendJSONString: the bulk output encoder on plain text (the fast path) and on text with
// escapes and multi-byte characters every few bytes.
func BenchmarkAppendJSONString(b *testing.B) {
	for _, c := range []struct{ name, unit string }{{"plain", "abcdefghij"}, {"mixed", "tab\t\"q\" ✓\n"}} {
		s := []byte(strings.Repeat(c.unit, (1<<20)/len(c.unit)))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			buf := make([]byte, 0, 4<<20)
			for b.Loop() {
				buf = appendJSONString(buf[:0], s)
			}
		})
	}
}

// FuzzSSEReader: the one SSE reader (model adapters, CLI, MCP client and relay) never panics, and every
// frame it returns, written back out in canonical form, reads back as the same frame.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		": comment\nevent: a\ndata: 1\ndata: 2\n\ndata: x\n\n",
		"id: 3\ndata: {\"type\":\"run_start\"}\n\nid: 4\ndata: {\"type\":\"text\"}\n\nevent: done\ndata: {}\n\n",
		"event: error\ndata: {\"error\":{\"code\":\"E_NOT_FOUND\",\"message\":\"no\"}}\n\n",
		": ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata: \"method\":\"notifications/progress\"}\r\n\r\n",
		"data: [DONE]\n\n", "data:\n\n", "id: 1\n\ndata: x", "event: done", "data:no-space\nretry: 5\nbogus\n\n",
	} {
		f.Add([]byte(s))
	}
	seedFiles(f, "openai")
	seedFiles(f, "anthropic")
	seedFiles(f, "gemini")
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := newSSEReader(bytes.NewReader(b), 1<<10)
		for {
			event, data, err := rd.next()
			if err != nil {
				return
			}
			id, cut := rd.id, rd.cut
			if cut || strings.ContainsRune(event+id+string(data), '\r') {
				continue
			}
			out := "event: " + event + "\n"
			if id != "" {
				out += "id: " + id + "\n"
			}
			if data != nil {
				out += "data: " + strings.ReplaceAll(string(data), "\n", "\ndata: ") + "\n"
			}
			back := newSSEReader(strings.NewReader(out+"\n"), 4<<10)
			e2, d2, err := back.next()
			if err != nil || e2 != event || back.id != id || string(d2) != string(data) || (d2 == nil) != (data == nil) || back.cut {
				t.Fatalf("%q → %q %q %q: read back %q %q %q %v", b, event, id, data, e2, back.id, d2, err)
			}
		}
	})
}
