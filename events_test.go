package main

import (
	"archive/tar"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

func TestEventsHelloPingSubscribeReplay(t *testing.T) {
	ts := newTestServer(t)
	// History published before the client connects.
	ts.s.hub.publish("computers", "computer_created", map[string]any{"id": "cmp_1"})
	ts.s.hub.publish("triggers", "agent_created", map[string]any{"name": "a"})
	ts.s.hub.publish("runs", "run_started", map[string]any{"runId": "run_1"})

	c := ts.dial("/v1/events", "")
	hello := frame(t, c)
	payload, _ := hello["payload"].(map[string]any)
	if hello["type"] != "hello" || hello["topic"] != "providers" || hello["at"] == "" || payload == nil {
		t.Fatalf("hello %v", hello)
	}
	topics, _ := payload["topics"].([]any)
	if len(topics) != 6 || payload["activeRuns"] == nil {
		t.Fatalf("hello payload %v", payload)
	}

	sendFrame(t, c, map[string]any{"type": "ping"})
	if f := frame(t, c); f["type"] != "pong" {
		t.Fatalf("pong %v", f)
	}

	sendFrame(t, c, map[string]any{"type": "subscribe", "topics": []string{"triggers", "runs", "bogus"}})
	if f := frame(t, c); f["type"] != "subscribed" || fmt.Sprint(f["topics"]) != "[triggers runs]" {
		t.Fatalf("subscribed %v", f)
	}
	// Replay: only the chosen topics, in order, in the event shape.
	f := frame(t, c)
	if f["type"] != "agent_created" || f["topic"] != "triggers" || f["payload"].(map[string]any)["name"] != "a" {
		t.Fatalf("replay 1 %v", f)
	}
	if f := frame(t, c); f["type"] != "run_started" {
		t.Fatalf("replay 2 %v", f)
	}
	// Live: filtered, and nothing replayed twice.
	ts.s.hub.publish("computers", "computer_started", nil)
	ts.s.hub.publish("runs", "run_finished", map[string]any{"runId": "run_1"})
	if f := frame(t, c); f["type"] != "run_finished" {
		t.Fatalf("live %v", f)
	}
	// Agent writes publish on triggers.
	ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: z\n"})
	if f := frame(t, c); f["type"] != "agent_created" || f["payload"].(map[string]any)["name"] != "z" {
		t.Fatalf("agent event %v", f)
	}
	if f := frame(t, c); f["type"] != "triggers_synced" || f["payload"].(map[string]any)["cause"] != "agent_created" {
		t.Fatalf("sync event %v", f)
	}
	// An unknown frame is answered with an error frame and the socket stays up.
	sendFrame(t, c, map[string]any{"type": "dance"})
	if f := frame(t, c); f["type"] != "error" {
		t.Fatalf("error frame %v", f)
	}
	websocket.Message.Send(c, "not json")
	if f := frame(t, c); f["type"] != "error" {
		t.Fatalf("error frame %v", f)
	}
	sendFrame(t, c, map[string]any{"type": "ping"})
	if f := frame(t, c); f["type"] != "pong" {
		t.Fatalf("pong after errors %v", f)
	}
}

func TestEventsWithoutSubscribeGetEverything(t *testing.T) {
	ts := newTestServer(t)
	c := ts.dial("/v1/events", "")
	frame(t, c) // hello
	eventually(t, "subscriber", func() bool { return ts.s.hub.subscribers() == 1 })
	for _, topic := range eventTopics {
		ts.s.hub.publish(topic, "x", nil)
	}
	for _, topic := range eventTopics {
		if f := frame(t, c); f["topic"] != topic {
			t.Fatalf("got %v, want topic %s", f, topic)
		}
	}
}

func TestEventsRingKeepsLast512(t *testing.T) {
	h := newHub(time.Now)
	defer h.Close()
	for i := 0; i < 1000; i++ {
		h.publish("runs", "n", i)
	}
	hist, last := h.history()
	if len(hist) != hubHistory || last != 1000 || hist[0].Payload != 1000-hubHistory || hist[len(hist)-1].Payload != 999 {
		t.Fatalf("history %d events, first %v, last %v", len(hist), hist[0].Payload, hist[len(hist)-1].Payload)
	}
}

func TestEventsOriginAndPlainGET(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.CORSOrigins = []string{"https://app.example"} })
	if _, err := ts.tryDial("/v1/events", "https://evil.example"); err == nil {
		t.Fatal("a foreign origin was accepted")
	}
	c := ts.dial("/v1/events", "https://app.example")
	if f := frame(t, c); f["type"] != "hello" {
		t.Fatal("no hello for a listed origin")
	}
	// No Origin at all (curl, CLIs) is accepted: a raw upgrade without the header.
	if r := ts.do("GET", "/v1/events", nil, upgradeHeaders()...); r.status != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade without Origin: %d", r.status)
	}
	// A plain GET gets the envelope, not a bare 400.
	if r := ts.do("GET", "/v1/events", nil); r.status != 422 || r.errCode(t) != codeSpecInvalid {
		t.Fatalf("plain GET: %d %s", r.status, r.body)
	}
}

func TestEventsClientThatNeverReads(t *testing.T) {
	ts := newTestServer(t)
	stuck := ts.dial("/v1/events", "")
	eventually(t, "subscriber", func() bool { return ts.s.hub.subscribers() == 1 })

	// The publisher never blocks: thousands of large events go out while the client reads nothing.
	big := strings.Repeat("x", 32<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 3000; i++ {
			ts.s.hub.publish("runs", "bulk", big)
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the publisher blocked on a client that does not read")
	}
	// The client is dropped and its socket closed by the server.
	eventually(t, "the stuck client to be dropped", func() bool { return ts.s.hub.subscribers() == 0 })
	stuck.SetReadDeadline(time.Now().Add(20 * time.Second))
	var err error
	for err == nil {
		var b []byte
		err = websocket.Message.Receive(stuck, &b)
	}
	if strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the server did not close the stuck socket: %v", err)
	}
	// The server goes on serving sockets and HTTP.
	c := ts.dial("/v1/events", "")
	frame(t, c)
	sendFrame(t, c, map[string]any{"type": "ping"})
	if f := frame(t, c); f["type"] != "pong" {
		t.Fatalf("pong %v", f)
	}
	if r := ts.do("GET", "/health", nil); r.status != 200 {
		t.Fatal("health")
	}
}

func TestEventsThousandClients(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 sockets")
	}
	ts := newTestServer(t)
	const n = 1000
	clients := make([]*websocket.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 50)
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := ts.tryDial("/v1/events", "")
			if err != nil {
				errs <- err
				return
			}
			clients[i] = c
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("dial: %v", err)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, c := range clients {
		if f := frame(t, c); f["type"] != "hello" {
			t.Fatalf("hello %v", f)
		}
	}
	eventually(t, "1,000 subscribers", func() bool { return ts.s.hub.subscribers() == n })
	ts.s.hub.publish("triggers", "agent_created", map[string]any{"name": "everyone"})
	for i, c := range clients {
		f := frame(t, c)
		if f["type"] != "agent_created" {
			t.Fatalf("client %d got %v", i, f)
		}
	}
	// Every one of them is closed at hub shutdown, and the hub waits for their handlers.
	ts.s.hub.Close()
	if ts.s.hub.subscribers() != 0 {
		t.Fatal("subscribers left after Close")
	}
}

// TestEventsUpgradeAnswersCarryTheVersion: the 101 and every refused upgrade carry X-Agent-Version, and a
// refusal is the contract's envelope rather than x/net/websocket's bare 400.
func TestEventsUpgradeAnswersCarryTheVersion(t *testing.T) {
	ts := newTestServer(t)
	for name, tc := range map[string]struct {
		mod    []string
		status int
	}{
		"accepted":            {nil, http.StatusSwitchingProtocols},
		"several subprotocol": {[]string{"Sec-WebSocket-Protocol", "a, b"}, http.StatusSwitchingProtocols},
		"old version":         {[]string{"Sec-WebSocket-Version", "8"}, 422},
		"no key":              {[]string{"Sec-WebSocket-Key", ""}, 422},
		"no Connection":       {[]string{"Connection", ""}, 422},
	} {
		r := ts.do("GET", "/v1/events", nil, append(upgradeHeaders(), tc.mod...)...)
		if r.status != tc.status || r.header.Get(versionHeader) != version {
			t.Errorf("%s: %d, %s=%q", name, r.status, versionHeader, r.header.Get(versionHeader))
		}
		if tc.status == 422 && r.errCode(t) != codeSpecInvalid {
			t.Errorf("%s: %s", name, r.body)
		}
	}
}

// An event that reached the socket live before the client subscribed is not replayed a second time.
func TestEventsSubscribeAfterLiveTrafficNoDuplicate(t *testing.T) {
	ts := newTestServer(t)
	ts.s.hub.publish("runs", "run_started", map[string]any{"runId": "run_old"})
	c := ts.dial("/v1/events", "")
	frame(t, c) // hello
	eventually(t, "subscriber", func() bool { return ts.s.hub.subscribers() == 1 })
	ts.s.hub.publish("runs", "run_started", map[string]any{"runId": "run_live"})
	if f := frame(t, c); f["payload"].(map[string]any)["runId"] != "run_live" {
		t.Fatalf("live %v", f)
	}
	sendFrame(t, c, map[string]any{"type": "subscribe", "topics": []string{"runs"}})
	if f := frame(t, c); f["type"] != "subscribed" {
		t.Fatalf("subscribed %v", f)
	}
	if f := frame(t, c); f["payload"].(map[string]any)["runId"] != "run_old" {
		t.Fatalf("replay %v", f)
	}
	ts.s.hub.publish("runs", "run_finished", map[string]any{"runId": "run_next"})
	if f := frame(t, c); f["payload"].(map[string]any)["runId"] != "run_next" {
		t.Fatalf("after the replay, got %v (an event sent twice?)", f)
	}
}

func TestEventsSentSet(t *testing.T) {
	var s sentSet
	for _, q := range []uint64{1, 2, 5, 700, 3} {
		s.add(q)
	}
	for q, want := range map[uint64]bool{1: true, 2: true, 3: true, 4: false, 5: true, 6: false, 699: false, 700: true, 701: false} {
		if s.has(q) != want {
			t.Errorf("has(%d) = %v", q, !want)
		}
	}
	s.add(1030) // 5 falls out of the window; its bit slot is reused by 1029 and must not read as sent
	if s.has(5) || s.has(1029) || !s.has(700) || !s.has(1030) {
		t.Fatalf("window: 5=%v 1029=%v 700=%v 1030=%v", s.has(5), s.has(1029), s.has(700), s.has(1030))
	}
	s.add(5000)
	if s.has(700) || s.has(1030) || !s.has(5000) {
		t.Fatal("a jump past the window keeps old bits")
	}
}

// subscribers counts the hub's connected sockets.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Every event type of DESIGN §7 fires from where its thing happens, and reaches WS /v1/events.
func TestEveryEventTypeIsPublished(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if strings.Contains(r.lastUser(), "ask first") && len(r.toolResults()) == 0 {
			return scriptReply{calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo hi"})}}
		}
		return scriptReply{text: "done"}
	})
	te := newE2E(t, so, "")
	c := te.dial("/v1/events", "")
	frame(t, c) // hello
	sendFrame(t, c, map[string]any{"type": "subscribe", "topics": eventTopics})
	var mu sync.Mutex
	seen := map[string]map[string]any{}
	go func() {
		for {
			var m map[string]any
			if websocket.JSON.Receive(c, &m) != nil {
				return
			}
			if p, ok := m["payload"].(map[string]any); ok && m["topic"] != nil && m["at"] != nil {
				mu.Lock()
				if seen[m["type"].(string)] == nil { // the first of each type
					seen[m["type"].(string)] = p
				}
				mu.Unlock()
			}
		}
	}()
	saw := func(typ string) bool { mu.Lock(); defer mu.Unlock(); return seen[typ] != nil }

	// triggers: agents and the trigger sync they cause; cron.
	te.createAgent(map[string]any{"name": "ev", "guardrails": map[string]any{"approvalMode": "ask"},
		"triggers": []any{map[string]any{"type": "cron", "schedule": "0 9 * * *", "prompt": "report"}}})
	te.createAgent(noComputer(map[string]any{"name": "gone"}))
	te.do("PUT", "/v1/agents/gone", map[string]any{"spec": noComputer(map[string]any{"name": "gone", "description": "x"})})
	te.do("DELETE", "/v1/agents/gone", nil)
	job := cronJob{ID: cronJobID("ev", "0 9 * * *", "report"), Agent: "ev", Schedule: "0 9 * * *", Prompt: "report"}
	done, err := te.s.fireCron(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	<-done
	te.s.triggers.cron.skipped(job, time.Now())

	// runs: a run that asks for approval, answered.
	go te.do("POST", "/v1/agents/ev/run", map[string]any{"input": "ask first"})
	var apr string
	eventually(t, "an approval", func() bool {
		list := te.do("GET", "/v1/approvals", nil).json(t)
		if aps := list["approvals"].([]any); len(aps) > 0 {
			apr = aps[0].(map[string]any)["approvalId"].(string)
		}
		return apr != ""
	})
	te.do("POST", "/v1/approvals/"+apr, map[string]any{"approve": false})

	// computers and the reaper.
	m := te.do("POST", "/v1/computers", map[string]any{"name": "evbox"}).json(t)
	id := m["id"].(string)
	te.do("POST", "/v1/computers/"+id+"/stop", nil)
	te.do("POST", "/v1/computers/"+id+"/start", nil)
	te.do("POST", "/v1/computers/"+id+"/ports", map[string]any{"port": 8080})
	te.call("POST", "/v1/computers/"+id+"/fs/upload?path=/work", tarGz(t, []tar.Header{{Name: "a.txt", Typeflag: tar.TypeReg}}, map[string]string{"a.txt": "x"}), 200, nil)
	te.do("DELETE", "/v1/computers/"+id, nil)
	// A process left by an exec of a server that died (recorded as the exec wrapper records it); the
	// reconcile pass a restart runs kills it.
	rec := te.do("POST", "/v1/computers", map[string]any{"name": "recbox"}).json(t)["id"].(string)
	te.call("POST", "/v1/computers/"+rec+"/exec", map[string]any{"cmd": "setsid sleep 4322 >/dev/null 2>&1 </dev/null & echo $! > /tmp/.agentd-exec-left.pid"}, 200, nil)
	eventually(t, "computer_reconciled", func() bool {
		te.s.computers.reconcile(context.Background(), nil)
		return saw("computer_reconciled")
	})
	m = te.do("POST", "/v1/computers", map[string]any{"name": "idlebox", "idleTimeoutSec": 1}).json(t)
	te.s.computers.setNow(func() time.Time { return time.Now().Add(time.Hour) })
	te.s.computers.sweep(context.Background())
	te.s.computers.setNow(time.Now)

	// providers: the model provider stops answering; the next probe round flips it.
	te.s.models.mu.Lock()
	te.s.models.probeTTL = 0
	te.s.models.mu.Unlock()
	te.do("GET", "/v1/models", nil)
	so.Close()
	eventually(t, "provider_changed", func() bool { te.do("GET", "/v1/models", nil); return saw("provider_changed") })

	want := []string{"agent_created", "agent_updated", "agent_deleted", "triggers_synced", "cron_fired", "cron_skipped",
		"run_started", "run_finished", "approval_required", "approval_answered",
		"computer_created", "computer_stopped", "computer_started", "port_exposed", "uploaded", "computer_destroyed",
		"computer_reaped", "computer_reconciled", "provider_changed"}
	missing := func() []string {
		var out []string
		for _, typ := range want {
			if !saw(typ) {
				out = append(out, typ)
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("never published: %v", m)
	}
	mu.Lock()
	defer mu.Unlock()
	for typ, check := range map[string]func(p map[string]any) bool{
		"agent_deleted":      func(p map[string]any) bool { return p["name"] == "gone" },
		"cron_fired":         func(p map[string]any) bool { return p["jobId"] == job.ID && p["runId"] != nil },
		"computer_destroyed": func(p map[string]any) bool { return p["id"] == id },
		"port_exposed": func(p map[string]any) bool {
			return p["computerId"] == id && p["port"] == float64(8080) && p["hostPort"] != nil
		},
		"uploaded":          func(p map[string]any) bool { return p["computerId"] == id && p["entries"] == float64(1) },
		"approval_answered": func(p map[string]any) bool { return p["approvalId"] == apr && p["approved"] == false },
		"provider_changed": func(p map[string]any) bool {
			return p["kind"] == "model" && p["name"] == "openai" && p["available"] == false
		},
		"computer_reaped":     func(p map[string]any) bool { return p["reason"] == "idle" },
		"computer_reconciled": func(p map[string]any) bool { return p["computerId"] == rec && p["killed"].(float64) >= 1 },
		"run_finished":        func(p map[string]any) bool { return p["runId"] != nil && p["status"] != "running" },
	} {
		if !check(seen[typ]) {
			t.Errorf("%s payload %v", typ, seen[typ])
		}
	}
}
