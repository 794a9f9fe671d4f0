// api_idempotency.go — the Idempotency-Key cache for POST, PUT, PATCH and DELETE.
//
// Rules (docs/API.md, DESIGN §3): keyed on method + full URL + key; in memory; entries live 15 minutes; soft cap
// 1000 entries (expired first, then oldest); only responses with status < 400 are recorded; streaming
// responses (SSE, hijacked sockets) are never recorded; a replay short-circuits the handler and carries
// Idempotency-Replayed: true. A second request arriving while the first is still running waits for it.
// A key is bound to its request body (Stripe's rule): the same key with another body is 422 naming the
// key, never a replay of an answer to a different request. The recorded bodies are bounded in bytes
// (idemMaxBytes in all, idemMaxBody each), the oldest finished entries going first.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	idemTTL      = 15 * time.Minute
	idemSoftCap  = 1000
	idemMaxBody  = 1 << 20  // answers larger than this are not kept (they are still answered)
	idemMaxBytes = 64 << 20 // all kept answers together
)

type idempotencyCache struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*idemEntry
	bytes   int // kept answer bytes
}

type idemEntry struct {
	done     chan struct{} // closed when the first request finished
	streamed chan struct{} // closed when the first answer turned out to be a stream (never recorded)
	once     sync.Once
	ok       bool // recorded: replayable
	status   int
	header   http.Header
	body     []byte
	created  time.Time
	sum      [32]byte // sha256 of the request body the key was first used with
}

func newIdempotencyCache(now func() time.Time) *idempotencyCache {
	return &idempotencyCache{now: now, entries: map[string]*idemEntry{}}
}

// serve runs next, recording or replaying according to the Idempotency-Key header.
func (c *idempotencyCache) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key := r.Header.Get("Idempotency-Key")
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		key = ""
	}
	if key == "" || isStreamOrSocket(r) {
		next.ServeHTTP(w, r)
		return
	}
	ck := r.Method + " " + r.URL.String() + " " + key
	reqBody, err := io.ReadAll(r.Body) // already capped at 32 MB by ServeHTTP
	if err != nil {
		writeError(w, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	sum := sha256.Sum256(reqBody)

	for {
		c.mu.Lock()
		e, found := c.entries[ck]
		if found && c.now().Sub(e.created) > idemTTL {
			c.drop(ck, e)
			found = false
		}
		if !found {
			e = &idemEntry{done: make(chan struct{}), streamed: make(chan struct{}), created: c.now(), sum: sum}
			c.entries[ck] = e
			c.evictLocked()
			c.mu.Unlock()
			c.record(w, r, next, ck, e)
			return
		}
		c.mu.Unlock()
		if e.sum != sum {
			writeError(w, errorf(codeSpecInvalid, "Idempotency-Key %q was already used with a different request body", key).
				withHint("use a new Idempotency-Key for a new request; a retry must send the same body"))
			return
		}
		select {
		case <-e.done:
		case <-e.streamed:
			// Streams are never recorded, so a duplicate runs again at once instead of waiting for the
			// first stream to end.
			next.ServeHTTP(w, r)
			return
		case <-r.Context().Done():
			return
		}
		if e.ok {
			h := w.Header()
			for k, v := range e.header {
				h[k] = v
			}
			h.Set("Idempotency-Replayed", "true")
			w.WriteHeader(e.status)
			w.Write(e.body)
			return
		}
		// The first attempt failed or was not recordable; it was removed, so this one runs afresh.
	}
}

func (c *idempotencyCache) record(w http.ResponseWriter, r *http.Request, next http.Handler, ck string, e *idemEntry) {
	rec := &idemRecorder{ResponseWriter: w, status: http.StatusOK, entry: e}
	completed := false // false when the handler panicked: nothing of it may be replayed
	defer func() {
		c.mu.Lock()
		// A handler that outlived the key's TTL may find its entry replaced by a newer request's: that one
		// is not this answer's to record or to delete.
		mine := c.entries[ck] == e
		if mine && completed && rec.status < 400 && !rec.streaming && !rec.overflow {
			e.ok, e.status, e.body = true, rec.status, rec.buf.Bytes()
			c.bytes += len(e.body)
			e.header = w.Header().Clone()
			// Set afresh on every response: the version, and CORS headers, which depend on the caller's Origin.
			e.header.Del(versionHeader)
			for k := range e.header {
				if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
					e.header.Del(k)
				}
			}
			c.evictLocked()
		} else if mine {
			delete(c.entries, ck)
		}
		c.mu.Unlock()
		close(e.done)
	}()
	next.ServeHTTP(rec, r)
	completed = true
}

// evictLocked keeps the cache near its soft cap: expired entries go first, then the oldest finished ones.
func (c *idempotencyCache) evictLocked() {
	if len(c.entries) <= idemSoftCap && c.bytes <= idemMaxBytes {
		return
	}
	now := c.now()
	for k, e := range c.entries {
		if now.Sub(e.created) > idemTTL {
			c.drop(k, e)
		}
	}
	for len(c.entries) > idemSoftCap || c.bytes > idemMaxBytes {
		var oldestKey string
		var oldest time.Time
		for k, e := range c.entries {
			select {
			case <-e.done:
			default:
				continue // never evict a request still in flight
			}
			if oldestKey == "" || e.created.Before(oldest) {
				oldestKey, oldest = k, e.created
			}
		}
		if oldestKey == "" {
			return
		}
		c.drop(oldestKey, c.entries[oldestKey])
	}
}

func (c *idempotencyCache) drop(k string, e *idemEntry) {
	delete(c.entries, k)
	c.bytes -= len(e.body)
}

// idemRecorder tees the response so it can be replayed; flushing or hijacking marks it streaming.
type idemRecorder struct {
	http.ResponseWriter
	status    int
	wrote     bool
	streaming bool
	overflow  bool
	buf       bytes.Buffer
	entry     *idemEntry
}

func (r *idemRecorder) markStreaming() {
	r.streaming = true
	r.entry.once.Do(func() { close(r.entry.streamed) })
}

func (r *idemRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
		if strings.HasPrefix(r.Header().Get("Content-Type"), "text/event-stream") {
			r.markStreaming()
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *idemRecorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow && !r.streaming {
		if r.buf.Len()+len(p) > idemMaxBody {
			r.overflow = true
			r.buf.Reset()
		} else {
			r.buf.Write(p)
		}
	}
	return r.ResponseWriter.Write(p)
}

func (r *idemRecorder) Flush() {
	r.markStreaming()
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *idemRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.markStreaming()
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *idemRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
