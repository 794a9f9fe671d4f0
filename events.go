// events.go — the live event hub and the `WS /v1/events` socket.
//
// Entry points: hub.publish(topic, type, payload) from anywhere; handleEvents for the socket.
// Rules (docs/API.md Events, DESIGN §7): one ring buffer of the last 512 events; one buffered channel per
// subscriber; the publisher never blocks — a subscriber that falls behind is disconnected (its socket is
// closed at once, so a stuck write never holds a goroutine). On connect the server sends `hello` (topics,
// active runs); `{type:subscribe,topics}` is answered with `subscribed`, then the buffered history for those
// topics, then live traffic with no event twice; `{type:ping}` gets `pong`. Every event frame is
// {type, at, topic, payload}, encoded once at publish and shared by every socket. hub.Close ends every
// socket and waits for their goroutines (shutdown).
package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"
)

var eventTopics = []string{"computers", "runs", "providers", "triggers", "adapters", "reaper"}

const (
	hubHistory       = 512
	hubSubscriberBuf = 256
	wsWriteTimeout   = 10 * time.Second
	wsMaxClientFrame = 64 << 10 // client frames are small control messages
)

// event is one frame on the socket.
type event struct {
	Type    string `json:"type"`
	At      string `json:"at"`
	Topic   string `json:"topic"`
	Payload any    `json:"payload"`

	seq  uint64 // publish order, so a replay and the live stream never repeat an event
	wire []byte // the encoded frame
}

type hub struct {
	now func() time.Time

	mu      sync.Mutex
	ring    []*event // circular, at most hubHistory
	head    int      // index of the oldest event once the ring is full
	seq     uint64
	subs    map[*subscriber]struct{}
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup // socket handlers
}

type subscriber struct {
	ch      chan *event
	dropped chan struct{} // closed when the hub gave up on this subscriber, or it left
	once    sync.Once
}

func (s *subscriber) drop() { s.once.Do(func() { close(s.dropped) }) }

func newHub(now func() time.Time) *hub {
	return &hub{now: now, subs: map[*subscriber]struct{}{}, closing: make(chan struct{}),
		ring: make([]*event, 0, hubHistory)}
}

// publish records the event and fans it out without ever blocking.
func (h *hub) publish(topic, typ string, payload any) {
	ev := &event{Type: typ, At: timestamp(h.now()), Topic: topic, Payload: payload}
	wire, err := json.Marshal(ev)
	if err != nil {
		ev.Payload = map[string]any{"error": "payload could not be encoded: " + err.Error()}
		wire, _ = json.Marshal(ev)
	}
	ev.wire = wire
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	ev.seq = h.seq
	if len(h.ring) < hubHistory {
		h.ring = append(h.ring, ev)
	} else {
		h.ring[h.head] = ev
		h.head = (h.head + 1) % hubHistory
	}
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			delete(h.subs, s)
			s.drop()
		}
	}
}

// historyLocked returns the buffered events, oldest first.
func (h *hub) historyLocked() []*event {
	out := make([]*event, 0, len(h.ring))
	out = append(out, h.ring[h.head:]...)
	return append(out, h.ring[:h.head]...)
}

// history returns the buffered events, oldest first, and the sequence number of the newest.
func (h *hub) history() ([]*event, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.historyLocked(), h.seq
}

// subscribe registers a subscriber and returns it with a copy of the history, atomically, so no event
// falls between the two: the subscriber receives every event published after the last one returned.
func (h *hub) subscribe() (*subscriber, []event) {
	s := &subscriber{ch: make(chan *event, hubSubscriberBuf), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.drop()
		return s, nil
	}
	h.subs[s] = struct{}{}
	hist := h.historyLocked()
	out := make([]event, len(hist))
	for i, ev := range hist {
		out[i] = *ev
	}
	return s, out
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.drop()
}

// Close disconnects every subscriber and waits for the socket handlers to return. Idempotent.
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
func (s *server) handleEvents(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkWebsocket(w, r); err != nil {
		return err
	}
	serveWebsocket(w, r, func(c *websocket.Conn) { s.hub.serveSocket(c, s.activeRuns) })
	return nil
}

// serveWebsocket completes an upgrade already checked by checkWebsocket; every socket of the API
// (events, terminal) goes through it.
func serveWebsocket(w http.ResponseWriter, r *http.Request, handler func(*websocket.Conn)) {
	ws := websocket.Server{
		Handshake: func(cfg *websocket.Config, _ *http.Request) error {
			// The 101 is written by x/net/websocket on the hijacked connection, past ServeHTTP's headers:
			// the version goes in here. Several offered subprotocols would make it answer a bare 400.
			cfg.Header = http.Header{versionHeader: {version}}
			if len(cfg.Protocol) > 1 {
				cfg.Protocol = cfg.Protocol[:1]
			}
			return nil
		},
		Handler: handler,
	}
	ws.ServeHTTP(w, r)
}

// checkWebsocket refuses an upgrade that x/net/websocket would answer with a bare 400 (no envelope).
func (s *server) checkWebsocket(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errorf(codeSpecInvalid, "%s is a WebSocket endpoint", r.URL.Path).
			withHint("connect with a WebSocket client (Upgrade: websocket)")
	}
	// What x/net/websocket would refuse with a bare 400 (no envelope, no version) is refused here.
	if !headerHasToken(r.Header, "Connection", "upgrade") || r.Header.Get("Sec-WebSocket-Key") == "" {
		return errorf(codeSpecInvalid, "malformed WebSocket upgrade: Connection: Upgrade and Sec-WebSocket-Key are required").
			withHint("connect with a WebSocket client")
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return errorf(codeSpecInvalid, "unsupported WebSocket version %q", v).withHint("use WebSocket version 13")
	}
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r) {
		return errorf(codeExecDenied, "origin %q is not allowed", o).withHint("add the origin to corsOrigins")
	}
	return nil
}

// headerHasToken reports whether a comma-separated header lists token (ASCII case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
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
	c.MaxPayloadBytes = wsMaxClientFrame

	sub, _ := h.subscribe()
	// The closer: a dropped subscriber or a closing hub closes the socket at once, which unblocks a
	// write stuck on a client that does not read and ends the reader.
	leaving := make(chan struct{})
	closerDone := make(chan struct{})
	go func() {
		defer close(closerDone)
		select {
		case <-sub.dropped:
		case <-h.closing:
		case <-leaving:
		}
		c.Close()
	}()
	// One writer (this goroutine); the reader forwards control frames to it.
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
			case <-leaving:
				return
			}
		}
	}()
	defer func() {
		h.unsubscribe(sub)
		close(leaving)
		<-closerDone
		<-readerDone
	}()

	sendRaw := func(b []byte) bool {
		c.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
		return websocket.Message.Send(c, string(b)) == nil
	}
	send := func(v any) bool {
		b, err := json.Marshal(v)
		return err == nil && sendRaw(b)
	}
	if !send(event{Type: "hello", At: timestamp(h.now()), Topic: "providers",
		Payload: map[string]any{"topics": eventTopics, "activeRuns": activeRuns()}}) {
		return
	}
	var filter []string // nil: every topic
	var sentUpTo uint64 // events at or below this were replayed; the live stream skips them
	// sent remembers which events this socket already carried, so a replay after live traffic (a
	// subscribe sent after the hello) never repeats one.
	var sent sentSet
	for {
		select {
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
				history, last := h.history()
				for _, ev := range history {
					if sent.has(ev.seq) || !slices.Contains(filter, ev.Topic) {
						continue
					}
					if !sendRaw(ev.wire) {
						return
					}
					sent.add(ev.seq)
				}
				sentUpTo = last
			default:
				if !send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid,
					"unknown frame type %q", f.Type).withHint("send {type: subscribe, topics: [...]} or {type: ping}")}) {
					return
				}
			}
		case ev := <-sub.ch:
			if ev.seq <= sentUpTo || (filter != nil && !slices.Contains(filter, ev.Topic)) {
				continue
			}
			if !sendRaw(ev.wire) {
				return
			}
			sent.add(ev.seq)
		}
	}
}

// sentSet is a bitmap of the last sentWindow sequence numbers a socket carried (128 bytes). The window is
// twice the ring, so every event a replay can still offer is inside it.
const sentWindow = 2 * hubHistory

type sentSet struct {
	bits [sentWindow / 64]uint64
	max  uint64 // highest seq added; bits cover (max-sentWindow, max]
}

func (s *sentSet) add(seq uint64) {
	if seq > s.max {
		if seq-s.max >= sentWindow {
			s.bits = [sentWindow / 64]uint64{}
		} else {
			for q := s.max + 1; q < seq; q++ {
				s.bits[q%sentWindow/64] &^= 1 << (q % 64)
			}
		}
		s.max = seq
	}
	if s.max-seq < sentWindow {
		s.bits[seq%sentWindow/64] |= 1 << (seq % 64)
	}
}

func (s *sentSet) has(seq uint64) bool {
	return seq <= s.max && s.max-seq < sentWindow && s.bits[seq%sentWindow/64]&(1<<(seq%64)) != 0
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
