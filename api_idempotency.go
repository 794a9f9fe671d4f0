// api_idempotency.go — the Idempotency-Key cache for POST, PUT, PATCH and DELETE, and the replay book it
// shares with webhook deliveries (triggers.go): a first request's answer kept by key, so a retry is
// answered from it instead of doing the work twice.
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
	"slices"
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

// replayBook remembers, by key and for ttl, the first request of each key and then its answer. begin
// tells a request whether it is the first (it must finish the entry) or a retry (it waits for done).
// Past maxKeys entries or maxBytes of kept answers, expired answers go first, then the oldest; an
// entry whose first request is still running is never dropped.
type replayBook[T any] struct {
	now      func() time.Time
	ttl      time.Duration
	maxKeys  int
	maxBytes int

	mu      sync.Mutex
	entries map[string]*replayEntry[T]
	bytes   int // sizes of the kept answers
}

type replayEntry[T any] struct {
	key     string
	created time.Time
	done    chan struct{} // closed by finish
	kept    bool          // finish kept the answer: a retry is answered from it
	size    int
	v       T // the caller's: what the first request was, and its answer once done is closed
}

func newReplayBook[T any](now func() time.Time, ttl time.Duration, maxKeys, maxBytes int) *replayBook[T] {
	return &replayBook[T]{now: now, ttl: ttl, maxKeys: maxKeys, maxBytes: maxBytes, entries: map[string]*replayEntry[T]{}}
}

// begin returns key's entry and false, or, when it has none still within ttl, a new entry holding v and
// true: the caller is the first request and must finish it.
func (b *replayBook[T]) begin(key string, v T) (*replayEntry[T], bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if e, ok := b.entries[key]; ok {
		if now.Sub(e.created) <= b.ttl {
			return e, false
		}
		b.drop(e)
	}
	e := &replayEntry[T]{key: key, created: now, done: make(chan struct{}), v: v}
	b.entries[key] = e
	b.evictLocked()
	return e, true
}

// finish ends the first request: its answer (set in e.v before) is kept for retries, or its key is freed
// so the next request runs afresh. A first request that outlived the ttl may find its key taken by a
// newer one: that entry is not its to keep or to delete.
func (b *replayBook[T]) finish(e *replayEntry[T], keep bool, size int) {
	b.mu.Lock()
	if b.entries[e.key] == e {
		if keep {
			e.kept, e.size = true, size
			b.bytes += size
			b.evictLocked()
		} else {
			delete(b.entries, e.key)
		}
	}
	b.mu.Unlock()
	close(e.done)
}

func (b *replayBook[T]) evictLocked() {
	if len(b.entries) <= b.maxKeys && b.bytes <= b.maxBytes {
		return
	}
	now := b.now()
	var answered []*replayEntry[T]
	for _, e := range b.entries {
		select {
		case <-e.done:
		default:
			continue // never evict a request still in flight
		}
		if now.Sub(e.created) > b.ttl {
			b.drop(e)
		} else {
			answered = append(answered, e)
		}
	}
	slices.SortFunc(answered, func(x, y *replayEntry[T]) int { return x.created.Compare(y.created) })
	for i := 0; (len(b.entries) > b.maxKeys || b.bytes > b.maxBytes) && i < len(answered); i++ {
		b.drop(answered[i])
	}
}

func (b *replayBook[T]) drop(e *replayEntry[T]) {
	delete(b.entries, e.key)
	b.bytes -= e.size
}

// idempotencyCache is the replay book of Idempotency-Key requests.
type idempotencyCache struct{ *replayBook[*idemRequest] }

type idemRequest struct {
	sum      [32]byte      // sha256 of the request body the key was first used with
	streamed chan struct{} // closed when the first answer turned out to be a stream (never recorded)
	once     sync.Once
	status   int
	header   http.Header
	body     []byte
}

func newIdempotencyCache(now func() time.Time) *idempotencyCache {
	return &idempotencyCache{newReplayBook[*idemRequest](now, idemTTL, idemSoftCap, idemMaxBytes)}
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
		e, first := c.begin(ck, &idemRequest{sum: sum, streamed: make(chan struct{})})
		if first {
			c.record(w, r, next, e)
			return
		}
		if e.v.sum != sum {
			writeError(w, errorf(codeSpecInvalid, "Idempotency-Key %q was already used with a different request body", key).
				withHint("use a new Idempotency-Key for a new request; a retry must send the same body"))
			return
		}
		select {
		case <-e.done:
		case <-e.v.streamed:
			// Streams are never recorded, so a duplicate runs again at once instead of waiting for the
			// first stream to end.
			next.ServeHTTP(w, r)
			return
		case <-r.Context().Done():
			return
		}
		if e.kept {
			h := w.Header()
			for k, v := range e.v.header {
				h[k] = v
			}
			h.Set("Idempotency-Replayed", "true")
			w.WriteHeader(e.v.status)
			w.Write(e.v.body)
			return
		}
		// The first attempt failed or was not recordable; it was removed, so this one runs afresh.
	}
}

func (c *idempotencyCache) record(w http.ResponseWriter, r *http.Request, next http.Handler, e *replayEntry[*idemRequest]) {
	rec := &idemRecorder{ResponseWriter: w, status: http.StatusOK, req: e.v}
	completed := false // false when the handler panicked: nothing of it may be replayed
	defer func() {
		keep := completed && rec.status < 400 && !rec.streaming && !rec.overflow
		if keep {
			e.v.status, e.v.body = rec.status, rec.buf.Bytes()
			e.v.header = w.Header().Clone()
			// Set afresh on every response: the version, and CORS headers, which depend on the caller's Origin.
			e.v.header.Del(versionHeader)
			for k := range e.v.header {
				if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
					e.v.header.Del(k)
				}
			}
		}
		c.finish(e, keep, len(e.v.body))
	}()
	next.ServeHTTP(rec, r)
	completed = true
}

// idemRecorder tees the response so it can be replayed; flushing or hijacking marks it streaming.
type idemRecorder struct {
	http.ResponseWriter
	status    int
	wrote     bool
	streaming bool
	overflow  bool
	buf       bytes.Buffer
	req       *idemRequest
}

func (r *idemRecorder) markStreaming() {
	r.streaming = true
	r.req.once.Do(func() { close(r.req.streamed) })
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
