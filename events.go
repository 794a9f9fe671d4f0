// events.go — the live event hub and the `WS /v1/events` socket.
//
// Entry points: hub.publish(topic, type, payload) from anywhere; handleEvents for the socket.
// Rules (API.md Events, DESIGN §7): one ring buffer of the last 512 events; one buffered channel per
// subscriber; the publisher never blocks — a subscriber that falls behind is disconnected. On connect the
// server sends `hello` (topics, active runs); `{type:subscribe,topics}` is answered with `subscribed`, then
// the buffered history for those topics, then live traffic; `{type:ping}` gets `pong`. Every event frame is
// {type, at, topic, payload}. hub.Close ends every socket (shutdown).
package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/websocket"
)

var eventTopics = []string{"computers", "runs", "providers", "triggers", "adapters", "reaper"}

const (
	hubHistory       = 512
	hubSubscriberBuf = 256
	wsWriteTimeout   = 10 * time.Second
)

// event is one frame on the socket.
type event struct {
	Type    string `json:"type"`
	At      string `json:"at"`
	Topic   string `json:"topic"`
	Payload any    `json:"payload"`
}

type hub struct {
	now func() time.Time

	mu      sync.Mutex
	ring    []event // last hubHistory events, oldest first
	subs    map[*subscriber]struct{}
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup // socket handlers
}

type subscriber struct {
	ch      chan event
	dropped chan struct{} // closed when the hub gave up on this subscriber
	once    sync.Once
}

func (s *subscriber) drop() { s.once.Do(func() { close(s.dropped) }) }

func newHub(now func() time.Time) *hub {
	return &hub{now: now, subs: map[*subscriber]struct{}{}, closing: make(chan struct{})}
}

// publish records the event and fans it out without ever blocking.
func (h *hub) publish(topic, typ string, payload any) {
	ev := event{Type: typ, At: timestamp(h.now()), Topic: topic, Payload: payload}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if len(h.ring) == hubHistory {
		copy(h.ring, h.ring[1:])
		h.ring = h.ring[:hubHistory-1]
	}
	h.ring = append(h.ring, ev)
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			delete(h.subs, s)
			s.drop()
		}
	}
}

// subscribe registers a subscriber and returns it with a copy of the history, atomically, so no event
// falls between the replay and the live stream.
func (h *hub) subscribe() (*subscriber, []event) {
	s := &subscriber{ch: make(chan event, hubSubscriberBuf), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.drop()
		return s, nil
	}
	h.subs[s] = struct{}{}
	return s, slices.Clone(h.ring)
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.drop()
}

// Close disconnects every subscriber and waits for the socket handlers to return.
func (h *hub) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.closing)
		for s := range h.subs {
			delete(h.subs, s)
			s.drop()
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// handleEvents upgrades to a WebSocket. A request without Origin (curl, CLIs) is accepted; a present
// Origin must be the server's own or listed in corsOrigins.
func (s *server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if !s.websocketAllowed(w, r) {
		return
	}
	ws := websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler:   func(c *websocket.Conn) { s.hub.serveSocket(c, s.activeRuns) },
	}
	ws.ServeHTTP(w, r)
}

// websocketAllowed checks the upgrade request and answers with the envelope when it is refused.
func (s *server) websocketAllowed(w http.ResponseWriter, r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r) {
		writeError(w, errorf(codeExecDenied, "origin %q is not allowed", o).withHint("add the origin to corsOrigins"))
		return false
	}
	return true
}

type wsClientFrame struct {
	Type   string   `json:"type"`
	Topics []string `json:"topics"`
}

func (h *hub) serveSocket(c *websocket.Conn, activeRuns func() []map[string]any) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.Close()
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	defer c.Close()

	sub, _ := h.subscribe()
	defer h.unsubscribe(sub)

	// One writer goroutine (this one); the reader forwards control frames to it.
	control := make(chan wsClientFrame, 8)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			var raw []byte
			if err := websocket.Message.Receive(c, &raw); err != nil {
				return
			}
			var f wsClientFrame
			if json.Unmarshal(raw, &f) != nil {
				f = wsClientFrame{Type: "invalid"}
			}
			select {
			case control <- f:
			case <-sub.dropped:
				return
			}
		}
	}()

	send := func(v any) bool {
		c.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
		return websocket.JSON.Send(c, v) == nil
	}
	if !send(event{Type: "hello", At: timestamp(h.now()), Topic: "providers",
		Payload: map[string]any{"topics": eventTopics, "activeRuns": activeRuns()}}) {
		return
	}
	var filter []string // nil: every topic
	for {
		select {
		case <-h.closing:
			return
		case <-sub.dropped:
			return
		case <-readerDone:
			return
		case f := <-control:
			switch f.Type {
			case "ping":
				if !send(map[string]any{"type": "pong", "at": timestamp(h.now())}) {
					return
				}
			case "subscribe":
				filter = validTopics(f.Topics)
				if !send(map[string]any{"type": "subscribed", "topics": filter}) {
					return
				}
				// Replay history for the chosen topics. Live events published meanwhile queue in sub.ch
				// and may repeat the tail of the history; clients key on (at, type, payload) if they care.
				h.mu.Lock()
				history := slices.Clone(h.ring)
				h.mu.Unlock()
				for _, ev := range history {
					if slices.Contains(filter, ev.Topic) && !send(ev) {
						return
					}
				}
			default:
				if !send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid,
					"unknown frame type %q", f.Type).withHint("send {type: subscribe, topics: [...]} or {type: ping}")}) {
					return
				}
			}
		case ev := <-sub.ch:
			if filter != nil && !slices.Contains(filter, ev.Topic) {
				continue
			}
			if !send(ev) {
				return
			}
		}
	}
}

// validTopics keeps the known topics of a subscribe request; an empty list means every topic.
func validTopics(req []string) []string {
	if len(req) == 0 {
		return slices.Clone(eventTopics)
	}
	out := []string{}
	for _, t := range req {
		if slices.Contains(eventTopics, t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// timestamp formats t as the contract's RFC 3339 UTC form with milliseconds and Z.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
