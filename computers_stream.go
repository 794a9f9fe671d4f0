// computers_stream.go — TCP streams carried over the warm exec channel, both halves: the host opens one to
// a port inside the machine (port forwards of machines without a network), the helper opens one for each
// connection accepted on the machine's egress proxy port (computers_egress.go serves it on the host).
//
// Entry points: chanStream (a connection-like end of one stream, the same type on both sides),
// splice (pipes a stream and a connection until both are done).
//
// Frames (computers_wire.go, with every other kind): frameOpen (host → helper: connect to 127.0.0.1:port inside,
// JSON {"port":N}), answered by frameOpened or frameClose (why); frameListen (host → helper, id 0: listen
// on 127.0.0.1:port), after which each accepted connection is a frameAccept whose id has helperStreamBit set
// (the two sides never pick the same id); then frameData both ways, frameFin (no more bytes this way),
// frameClose (the stream is over, either side) and frameAck (bytes consumed).
//
// Rules: the frame reader of either side never blocks on a stream: data is queued, and the sender keeps
// at most chanWindow bytes unacknowledged, so the queue is bounded and one slow connection stalls nothing
// else. A channel that ends closes every stream it carried.
package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
)

// chanStream is one end of a stream. Reads take queued data frames (acknowledging them); writes wait
// while a window is unacknowledged.
type chanStream struct {
	id   uint32
	send func(id uint32, kind byte, payload []byte) error
	gone func() // removes the stream from its side's table (once; never called with a lock held)

	mu      sync.Mutex
	cond    *sync.Cond
	in      [][]byte
	inFin   bool   // the other side sent frameFin
	closed  bool   // over: closed here or by the other side
	reason  string // the other side's frameClose payload
	unack   int    // bytes written and not yet acknowledged
	wfin    bool
	done    chan struct{}
	opened  chan struct{} // frameOpened or frameClose came (host-opened streams)
	dialErr string
}

func newChanStream(id uint32, send func(uint32, byte, []byte) error, gone func()) *chanStream {
	s := &chanStream{id: id, send: send, gone: gone, done: make(chan struct{}), opened: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// frame handles one frame the other side sent for this stream (from the frame reader: never blocks).
func (s *chanStream) frame(kind byte, payload []byte) {
	s.mu.Lock()
	ended := false
	defer func() {
		s.cond.Broadcast()
		s.mu.Unlock()
		if ended {
			s.gone()
		}
	}()
	switch kind {
	case frameData:
		if !s.closed && len(payload) > 0 {
			s.in = append(s.in, payload)
		}
	case frameFin:
		s.inFin = true
	case frameAck:
		if len(payload) == 4 {
			s.unack -= int(binary.BigEndian.Uint32(payload))
		}
	case frameOpened:
		s.signalOpened("")
	case frameClose:
		s.signalOpened(firstNonEmpty(string(payload), "the connection was refused"))
		s.reason = string(payload)
		ended = s.endLocked()
	}
}

func (s *chanStream) signalOpened(err string) {
	select {
	case <-s.opened:
	default:
		s.dialErr = err
		close(s.opened)
	}
}

// endLocked marks the stream over (s.mu held) and says whether it just ended: the caller then removes
// it from its table (gone), after unlocking.
func (s *chanStream) endLocked() bool {
	if s.closed {
		return false
	}
	s.closed = true
	close(s.done)
	s.cond.Broadcast()
	return true
}

// broken ends the stream because its channel ended.
func (s *chanStream) broken(why string) { s.frame(frameClose, []byte(why)) }

func (s *chanStream) Read(b []byte) (int, error) {
	s.mu.Lock()
	for len(s.in) == 0 && !s.inFin && !s.closed {
		s.cond.Wait()
	}
	if len(s.in) == 0 {
		s.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(b, s.in[0])
	ack := 0
	if n == len(s.in[0]) {
		ack = n
		s.in = s.in[1:]
	} else {
		s.in[0] = s.in[0][n:]
		ack = n
	}
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(ack))
		s.send(s.id, frameAck, a[:])
	}
	return n, nil
}

var errStreamClosed = errors.New("the stream is closed")

func (s *chanStream) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), chanChunk)]
		s.mu.Lock()
		for s.unack >= chanWindow && !s.closed {
			s.cond.Wait()
		}
		if s.closed || s.wfin {
			s.mu.Unlock()
			return n, errStreamClosed
		}
		s.unack += len(c)
		s.mu.Unlock()
		if err := s.send(s.id, frameData, c); err != nil {
			return n, err
		}
		n += len(c)
		b = b[len(c):]
	}
	return n, nil
}

// CloseWrite tells the other side no more bytes come this way.
func (s *chanStream) CloseWrite() error {
	s.mu.Lock()
	already := s.wfin || s.closed
	s.wfin = true
	s.mu.Unlock()
	if !already {
		return s.send(s.id, frameFin, nil)
	}
	return nil
}

// Close ends the stream on both sides.
func (s *chanStream) Close() error { return s.closeWith("") }

func (s *chanStream) closeWith(why string) error {
	s.mu.Lock()
	ended := s.endLocked()
	s.mu.Unlock()
	if !ended {
		return nil
	}
	s.gone()
	return s.send(s.id, frameClose, []byte(why))
}

// halfConn is what splice pipes: a stream, a *net.TCPConn.
type halfConn interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// splice pipes a stream and a connection both ways until both directions are done, then closes both.
// When the stream ends under it (the other side closed it, or the channel ended), what was received is
// still written to c, then c is closed: the copy reading c, which might wait forever, ends too.
func splice(s *chanStream, c halfConn) {
	toC, fromC := make(chan struct{}), make(chan struct{})
	go func() { io.Copy(c, s); c.CloseWrite(); close(toC) }()
	go func() { io.Copy(s, c); s.CloseWrite(); close(fromC) }()
	select {
	case <-fromC:
		<-toC
	case <-s.done:
		<-toC
		c.Close()
		<-fromC
	}
	c.Close()
	s.Close()
}

// asHalfConn gives a dialled connection CloseWrite when it has one (TCP always does).
func asHalfConn(c net.Conn) halfConn {
	if h, ok := c.(halfConn); ok {
		return h
	}
	return closeOnlyConn{c}
}

type closeOnlyConn struct{ net.Conn }

func (c closeOnlyConn) CloseWrite() error { return nil }
