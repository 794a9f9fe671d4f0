// events_sse.go — the hand-rolled Server-Sent Events writer shared by every streaming endpoint, and the
// one SSE reader (sseReader) every client of a stream uses.
//
// Entry point: newSSE(w, pingEvery) then send(v) per event, fail(err) for an error frame, and close() which
// writes `event: done`. Rules (docs/API.md, DESIGN §3): Content-Type text/event-stream, Cache-Control
// no-cache, X-Accel-Buffering no; each event is `id: <seq>` plus one `data: <json>` line, flushed at
// once; a `: ping` comment every 15 s; the write deadline is cleared, and instead every write must drain
// within 60 s or the stream is declared stalled: Done() fires and the producer (run, exec) aborts.
// A client that simply disconnects is seen by the producer through r.Context() (or at the next write).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	ssePingEvery  = 15 * time.Second
	sseStallAfter = 60 * time.Second
)

var errStreamStalled = errors.New("stream consumer stalled for 60 s")

// sseWriter serialises writes to one SSE response. Safe for concurrent use.
type sseWriter struct {
	rc        *http.ResponseController
	w         http.ResponseWriter
	mu        sync.Mutex
	seq       int
	err       error // first write error; the stream is dead after it
	done      chan struct{}
	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
	stall     time.Duration
	frame     []byte // reused by sendOutput: one bulk frame's bytes
}

// newSSE writes the stream headers and starts the keep-alive pinger. The caller must call close().
func newSSE(w http.ResponseWriter, pingEvery time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s := &sseWriter{
		rc: http.NewResponseController(w), w: w,
		done: make(chan struct{}), stop: make(chan struct{}), stall: sseStallAfter,
	}
	s.rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	s.rc.Flush()
	s.wg.Add(1)
	go s.pinger(pingEvery)
	return s
}

func (s *sseWriter) pinger(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.write([]byte(": ping\n\n"))
		}
	}
}

// bind returns a context derived from parent that is cancelled as soon as the consumer is gone (write
// failed or stalled), so the producer behind the stream — an exec, a model call — stops with it. The
// returned cancel also waits for the watcher goroutine, which it owns.
func (s *sseWriter) bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); <-watcher }
}

// Done is closed when the consumer is gone (write failed or stalled past 60 s).
func (s *sseWriter) Done() <-chan struct{} { return s.done }

// Err reports why the stream died, or nil.
func (s *sseWriter) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// sendID writes one already-encoded event under a given id (a run's own event sequence number, so a
// follower that reconnects with Last-Event-ID neither skips nor repeats).
func (s *sseWriter) sendID(id int, raw []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = id
	return s.writeLocked(fmt.Appendf(nil, "id: %d\ndata: %s\n\n", id, raw))
}

// send writes one event as `id` + `data` lines.
func (s *sseWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// The id is taken under the same lock as the write, so concurrent senders' ids reach the wire in order.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.writeLocked(fmt.Appendf(nil, "id: %d\ndata: %s\n\n", s.seq, b))
}

// sendOutput writes one `{"data": data, "type": stream}` event, encoded by hand into a reused buffer:
// bulk command output is the one stream where encoding/json's allocations and copies cost throughput.
func (s *sseWriter) sendOutput(stream string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	b := append(s.frame[:0], "id: "...)
	b = strconv.AppendInt(b, int64(s.seq), 10)
	b = append(b, "\ndata: {\"data\":"...)
	b = appendJSONString(b, data)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, stream)
	b = append(b, "}\n\n"...)
	if cap(b) <= 2<<20 { // a bigger one (a rare, escaped frame) is not kept for the stream's life
		s.frame = b
	}
	return s.writeLocked(b)
}

// appendJSONString appends s as a JSON string. Runs of plain bytes are copied whole, found eight at a
// time; control characters, quotes, backslashes, U+2028/U+2029 and invalid UTF-8 (as U+FFFD) are
// escaped the way encoding/json escapes them.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plainJSON8(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))])) // no copy: small, not kept
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainJSON8 says whether the eight bytes packed in w all go into a JSON string as they are: ASCII, no
// control character, no quote, no backslash (the classic has-less and has-zero byte tricks).
func plainJSON8(w uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	below := (w - 0x20*lo) &^ w
	quote, bslash := w^('"'*lo), w^('\\'*lo)
	return (w|below|((quote-lo)&^quote)|((bslash-lo)&^bslash))&hi == 0
}

// fail writes an `event: error` frame carrying the contract's envelope.
func (s *sseWriter) fail(err error) error {
	b, _ := json.Marshal(map[string]any{"error": asAPIError(err)})
	return s.write(fmt.Appendf(nil, "event: error\ndata: %s\n\n", b))
}

// close writes the final `event: done` frame and stops the pinger. Idempotent.
func (s *sseWriter) close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.write([]byte("event: done\ndata: {}\n\n"))
	})
}

// write sends raw bytes with a per-write stall deadline, so a consumer that stops draining for 60 s
// is detected even though the stream itself has no overall deadline.
func (s *sseWriter) write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(p)
}

func (s *sseWriter) writeLocked(p []byte) error {
	if s.err != nil {
		return s.err
	}
	s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	_, err := s.w.Write(p)
	if err == nil {
		err = s.rc.Flush()
	}
	s.rc.SetWriteDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errStreamStalled
		}
		s.err = err
		close(s.done)
	}
	return err
}

// sseReader reads Server-Sent Events for every client of a stream (model adapters, the CLI, the MCP client
// and the MCP stdio relay): fields event, id and data (one space after the colon dropped; data lines
// joined with "\n"), `:` comments and unknown fields skipped, a frame ends at a blank line. A line longer
// than the reader's cap is an error (bufio.ErrTooLong).
type sseReader struct {
	sc  *bufio.Scanner
	id  string // the id field of the frame next returned last ("" when it had none)
	cut bool   // that frame was not ended by a blank line: the stream stopped inside it
}

func newSSEReader(r io.Reader, maxLine int) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return &sseReader{sc: sc}
}

// next returns the next frame that has an event or a data field; io.EOF at a clean end.
func (r *sseReader) next() (event string, data []byte, err error) {
	have := false
	r.id, r.cut = "", false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if have {
				return event, data, nil
			}
			r.id = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			event, have = string(value), true
		case "id":
			r.id = string(value)
		case "data":
			if data == nil {
				data = []byte{} // a frame with an empty data line still has data
			} else {
				data = append(data, '\n')
			}
			data = append(data, value...)
			have = true
		}
	}
	if err := r.sc.Err(); err != nil {
		return "", nil, err
	}
	if have {
		r.cut = true
		return event, data, nil
	}
	return "", nil, io.EOF
}
