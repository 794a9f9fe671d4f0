// api_conns.go — how many connections the server holds: a cap below the process's descriptor limit,
// with a small reserve where only /health is served, and shedding when both are full.
//
// Entry points: raiseFileLimit (at start: the soft descriptor limit up to the hard one) and
// newConnLimiter (wraps the listener in runServe); its connState is the http.Server's ConnState;
// connContext puts the connection in each request's context, where (*server).ServeHTTP refuses a
// reserve connection's other requests and marks a body being read (bodyStarted, bodyProgress) and a
// request answered (answered).
//
// Rules (docs/DESIGN.md §3, issues 17 and 25): past the cap a connection is still accepted into the
// reserve, where /health is answered and anything else is 503 with the connection closed, so a load
// balancer still sees the server alive while 20,000 slow clients knock. Past cap+reserve (or when accept
// itself runs out of descriptors) the server sheds a connection that serves nobody, so that the new one is
// still served: first one whose answer is written (closing), then the longest idle keep-alive, then the
// oldest still sending its headers, then the slowest still sending its body. A running handler (a
// stream, a socket, any request whose body is read) is never shed; when only those are left, Accept
// waits for one to close. A reserve connection must send its request within a few seconds.
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

const (
	connReserve      = 64
	reserveReadLimit = 5 * time.Second
)

// connCap is the cap for a descriptor limit: what is left after the store, engines' pipes, machines'
// forwarders and the reserve.
func connCap(fdLimit uint64) int {
	c := int(min(fdLimit, 1<<20)) - 256 - connReserve
	return max(c, 16)
}

// connLimiter counts open connections; past max, they are marked as reserve connections; past
// max+connReserve, one that serves nobody is shed.
type connLimiter struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   int
	conns  map[*limitedConn]struct{}
	freed  chan struct{} // closed and replaced when a connection closes
	closed chan struct{} // closed by Close: a waiting Accept returns
	once   sync.Once
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: map[*limitedConn]struct{}{},
		freed: make(chan struct{}), closed: make(chan struct{})}
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.open >= l.max+connReserve { // full, reserve included: shed one, or wait for one to close
			if v := l.victimLocked(time.Now()); v != nil {
				l.mu.Unlock()
				v.Close()
				continue
			}
			wait := l.freed
			l.mu.Unlock()
			select {
			case <-wait:
			case <-l.closed:
				return nil, net.ErrClosed
			}
			continue
		}
		l.mu.Unlock()
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) { // out of descriptors after all
				l.mu.Lock()
				v := l.victimLocked(time.Now())
				l.mu.Unlock()
				if v != nil {
					v.Close()
					continue
				}
			}
			return nil, err
		}
		now := time.Now()
		l.mu.Lock()
		l.open++
		lc := &limitedConn{Conn: c, l: l, reserve: l.open > l.max, state: http.StateNew, since: now}
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		if lc.reserve {
			c.SetReadDeadline(now.Add(reserveReadLimit))
		}
		return lc, nil
	}
}

// victimLocked picks the connection to shed (l.mu held), or nil: one closing after its answer, the
// longest idle, the oldest still sending headers, then the slowest body (bytes a second since it began).
func (l *connLimiter) victimLocked(now time.Time) *limitedConn {
	var best *limitedConn
	bestRank, bestScore := 99, 0.0
	for c := range l.conns {
		rank, score := 99, 0.0
		switch {
		case c.state == http.StateHijacked || c.state == http.StateClosed:
		case c.answered:
			rank, score = 0, -now.Sub(c.since).Seconds()
		case c.state == http.StateIdle:
			rank, score = 1, -now.Sub(c.since).Seconds()
		case c.state == http.StateNew:
			rank, score = 2, -now.Sub(c.since).Seconds()
		case c.bodyPending:
			rank, score = 3, float64(c.bodyBytes)/max(now.Sub(c.bodyFrom).Seconds(), 0.001)
		}
		if rank < bestRank || (rank == bestRank && rank < 99 && score < bestScore) {
			best, bestRank, bestScore = c, rank, score
		}
	}
	return best
}

// connState is the http.Server's ConnState hook: it records what each connection is doing.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	lc.state, lc.since = st, time.Now()
	lc.answered, lc.bodyPending = false, false
	l.mu.Unlock()
}

func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	l.open--
	delete(l.conns, c)
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

type limitedConn struct {
	net.Conn
	l       *connLimiter
	reserve bool
	once    sync.Once

	// Guarded by l.mu: what the connection is doing, for shedding.
	state       http.ConnState
	since       time.Time // when state last changed, or the answer was written
	answered    bool      // the handler returned: what is left is closing or keep-alive
	bodyPending bool      // a request body is being read
	bodyFrom    time.Time
	bodyBytes   int64
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

// bodyStarted marks that the request's body is about to be read.
func (c *limitedConn) bodyStarted() {
	c.l.mu.Lock()
	c.bodyPending, c.bodyFrom, c.bodyBytes = true, time.Now(), 0
	c.l.mu.Unlock()
}

// bodyProgress counts n more body bytes; done says the body ended (read whole, or cut off).
func (c *limitedConn) bodyProgress(n int, done bool) {
	c.l.mu.Lock()
	c.bodyBytes += int64(n)
	if done {
		c.bodyPending = false
	}
	c.l.mu.Unlock()
}

// handled marks the request's handler as returned: until the next request, the connection only
// finishes its answer and closes, or waits idle.
func (c *limitedConn) handled() {
	c.l.mu.Lock()
	if c.state == http.StateActive {
		c.answered, c.bodyPending, c.since = true, false, time.Now()
	}
	c.l.mu.Unlock()
}

// connKey holds, in a request's context, the *limitedConn it came on (none under httptest).
type connKey struct{}

// connContext is the http.Server's ConnContext: it gives handlers their connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// connOf returns the request's connection, or nil.
func connOf(ctx context.Context) *limitedConn {
	lc, _ := ctx.Value(connKey{}).(*limitedConn)
	return lc
}

// errAtCapacity answers a reserve connection's request that is not /health.
func errAtCapacity() *apiError {
	return &apiError{Code: codeQuota, status: http.StatusServiceUnavailable,
		Message: "the server is at its connection limit", Hint: "retry shortly; /health still answers"}
}
