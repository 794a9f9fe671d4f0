// api_conns.go — how many connections the server holds: a cap below the process's descriptor limit,
// with a small reserve where only /health is served.
//
// Entry points: raiseFileLimit (at start: the soft descriptor limit up to the hard one) and
// newConnLimiter (wraps the listener in runServe); (*server).ServeHTTP refuses a reserve connection's
// other requests.
//
// Rules (docs/DESIGN.md §3, issue 17): past the cap a connection is still accepted into the reserve,
// where /health is answered and anything else is 503 with the connection closed, so a load balancer
// still sees the server alive while 20,000 slow clients knock; past cap+reserve, Accept waits for a
// connection to close instead of running the process out of descriptors. A reserve connection must
// send its request within a few seconds.
package main

import (
	"context"
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

// raiseFileLimit lifts the soft descriptor limit to the hard one and returns the result.
func raiseFileLimit() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 1024
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return uint64(rl.Cur) // int64 on the BSDs
}

// connCap is the cap for a descriptor limit: what is left after the store, engines' pipes, machines'
// forwarders and the reserve.
func connCap(fdLimit uint64) int {
	c := int(min(fdLimit, 1<<20)) - 256 - connReserve
	return max(c, 16)
}

// connLimiter counts open connections; past max, they are marked as reserve connections.
type connLimiter struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   int
	freed  chan struct{} // closed and replaced when a connection closes
	closed chan struct{} // closed by Close: a waiting Accept returns
	once   sync.Once
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, freed: make(chan struct{}), closed: make(chan struct{})}
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.open >= l.max+connReserve { // full, reserve included: wait for one to close
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
			return nil, err
		}
		l.mu.Lock()
		l.open++
		reserve := l.open > l.max
		l.mu.Unlock()
		lc := &limitedConn{Conn: c, l: l, reserve: reserve}
		if reserve {
			c.SetReadDeadline(time.Now().Add(reserveReadLimit))
		}
		return lc, nil
	}
}

func (l *connLimiter) release() {
	l.mu.Lock()
	l.open--
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

type limitedConn struct {
	net.Conn
	l       *connLimiter
	reserve bool
	once    sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(c.l.release)
	return c.Conn.Close()
}

// reserveConnKey marks, in a request's context, a connection accepted past the cap.
type reserveConnKey struct{}

// connContext is the http.Server's ConnContext: it tells handlers about reserve connections.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok && lc.reserve {
		return context.WithValue(ctx, reserveConnKey{}, true)
	}
	return ctx
}

// errAtCapacity answers a reserve connection's request that is not /health.
func errAtCapacity() *apiError {
	return &apiError{Code: codeQuota, status: http.StatusServiceUnavailable,
		Message: "the server is at its connection limit", Hint: "retry shortly; /health still answers"}
}
