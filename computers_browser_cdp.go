// computers_browser_cdp.go — a Chrome DevTools Protocol client over x/net/websocket (issue 28): one
// connection to a browser's DevTools endpoint, commands matched to their answers by id, events handed to
// subscribers, flattened target sessions.
//
// Entry points: dialCDP (the handshake over any stream: here a stream to the machine's loopback, made by
// computerService.machineDial), cdpConn.call, cdpConn.subscribe, cdpConn.Close, cdpConn.done.
//
// Rules: the peer is untrusted (it is a program in the machine, which the machine's user controls): a
// message is at most cdpMaxMessage bytes, anything that is not a JSON object with an id we are waiting for
// or a method is dropped, an error answer becomes an error naming the method, and a subscriber that falls
// behind loses events (its channel is bounded) rather than stalling the reader. One reader goroutine per
// connection, owned by it: Close stops it and waits; every call in flight then fails.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/net/websocket"
)

// cdpMaxMessage bounds one message from the browser (a full-page screenshot of a long page is the largest).
const cdpMaxMessage = 64 << 20

type cdpConn struct {
	ws *websocket.Conn

	mu      sync.Mutex
	next    int64
	pending map[int64]chan cdpAnswer
	subs    map[*cdpSub]struct{}
	err     error // why the connection ended; nil while it is up

	closed chan struct{} // closed when the reader has ended
	wg     sync.WaitGroup
}

type cdpAnswer struct {
	Result json.RawMessage
	Err    *cdpError
}

type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    string `json:"data,omitempty"`
}

// cdpEvent is one event of the browser.
type cdpEvent struct {
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
}

type cdpSub struct {
	session string
	methods map[string]bool
	ch      chan cdpEvent
}

// dialCDP speaks the WebSocket handshake over rwc to the DevTools endpoint path (from DevToolsActivePort)
// on 127.0.0.1:port, and starts the reader.
func dialCDP(rwc io.ReadWriteCloser, port int, path string) (*cdpConn, error) {
	cfg, err := websocket.NewConfig(fmt.Sprintf("ws://127.0.0.1:%d%s", port, path), "http://127.0.0.1")
	if err != nil {
		rwc.Close()
		return nil, err
	}
	ws, err := websocket.NewClient(cfg, rwc)
	if err != nil {
		rwc.Close()
		return nil, fmt.Errorf("DevTools handshake: %w", err)
	}
	ws.MaxPayloadBytes = cdpMaxMessage
	c := &cdpConn{ws: ws, pending: map[int64]chan cdpAnswer{}, subs: map[*cdpSub]struct{}{}, closed: make(chan struct{})}
	c.wg.Add(1)
	go c.read()
	return c, nil
}

func (c *cdpConn) read() {
	defer c.wg.Done()
	var err error
	for {
		var raw []byte
		if err = websocket.Message.Receive(c.ws, &raw); err != nil {
			break
		}
		c.handle(raw)
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("the browser's DevTools connection ended: %v", err)
	}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.closed)
}

// handle routes one message from the browser: an answer to its caller, an event to its subscribers;
// anything else is dropped.
func (c *cdpConn) handle(raw []byte) {
	var msg struct {
		ID     *int64          `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *cdpError       `json:"error"`
		cdpEvent
	}
	if json.Unmarshal(raw, &msg) != nil {
		return // not a message of the protocol
	}
	if msg.ID != nil {
		c.mu.Lock()
		ch := c.pending[*msg.ID]
		delete(c.pending, *msg.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- cdpAnswer{Result: msg.Result, Err: msg.Error}
		}
		return
	}
	if msg.Method == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		if s.session == msg.SessionID && s.methods[msg.Method] {
			select {
			case s.ch <- msg.cdpEvent:
			default: // a subscriber that falls behind loses events
			}
		}
	}
}

// done is closed when the connection has ended (the browser exited, crashed or was closed).
func (c *cdpConn) done() <-chan struct{} { return c.closed }

// call sends method with params on session ("" is the browser itself) and decodes the result into out
// (nil: ignored).
func (c *cdpConn) call(ctx context.Context, session, method string, params, out any) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.next++
	id := c.next
	ch := make(chan cdpAnswer, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	if err := websocket.JSON.Send(c.ws, msg); err != nil {
		c.forget(id)
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case a, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("%s: %w", method, err)
		}
		if a.Err != nil {
			return &cdpCallError{method: method, e: *a.Err}
		}
		if out != nil && len(a.Result) > 0 {
			if err := json.Unmarshal(a.Result, out); err != nil {
				return fmt.Errorf("%s: the browser's answer does not decode: %v", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	}
}

func (c *cdpConn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// cdpCallError is the browser's error answer to one command.
type cdpCallError struct {
	method string
	e      cdpError
}

func (e *cdpCallError) Error() string {
	msg := e.method + ": " + e.e.Message
	if e.e.Data != "" {
		msg += " (" + e.e.Data + ")"
	}
	return msg
}

// subscribe delivers the events named (on session) to the returned channel until cancel.
func (c *cdpConn) subscribe(session string, methods ...string) (<-chan cdpEvent, func()) {
	s := &cdpSub{session: session, methods: map[string]bool{}, ch: make(chan cdpEvent, 64)}
	for _, m := range methods {
		s.methods[m] = true
	}
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s.ch, func() {
		c.mu.Lock()
		delete(c.subs, s)
		c.mu.Unlock()
	}
}

// Close ends the connection and waits for its reader.
func (c *cdpConn) Close() {
	c.mu.Lock()
	if c.err == nil {
		c.err = errors.New("the browser's DevTools connection was closed")
	}
	c.mu.Unlock()
	c.ws.Close()
	c.wg.Wait()
}
