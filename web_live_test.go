//go:build linux

package main

// The dashboard's live views never keep a status that changed before the page's event socket opened,
// or before the view listened. A view fetches its state over REST at once, while the page's shared
// WS /v1/events opens only after the first call (app.js), so what changes in between reaches the page
// over neither; and a view listens only once its first answer is drawn. The test puts a proxy
// (holdProxy) between a real Chromium and a real server that holds the socket's upgrade, and the list's
// answer, until the test releases them; it stops a machine or lets a run finish meanwhile and waits
// (polling the DOM with a deadline) for the page to show the true state. The same proxy cuts the event
// sockets and counts the terminal sockets for web_reconnect_test.go.
//
// Entry point: TestDashboardLiveBeforeSocket.

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate holds what reaches it until released; arrived is closed when the first one comes.
type gate struct {
	arrived, release chan struct{}
	once, freed      sync.Once
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) {
	g.once.Do(func() { close(g.arrived) })
	select {
	case <-g.release:
	case <-ctx.Done():
	}
}

func (g *gate) open() { g.freed.Do(func() { close(g.release) }) }

// waitArrived fails the test unless something reached the gate within 60 s.
func (g *gate) waitArrived(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s never reached the proxy", what)
	}
}

// holdProxy forwards everything to a server; with socket set it holds every WS /v1/events upgrade until
// that gate opens, with list set it holds the answer of the next GET /v1/computers. dropSockets ends the
// event sockets it carries (as a network cut would); terminals counts the terminal upgrades asked.
type holdProxy struct {
	url          string
	mu           sync.Mutex
	socket, list *gate
	cuts         []context.CancelFunc // one per event socket carried
	terminals    int
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	hp := &holdProxy{}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps Host: the page's origin stays its own
	rp.ErrorLog = log.New(io.Discard, "", 0)    // a closed tab cancels what was in flight
	rp.ModifyResponse = func(res *http.Response) error {
		if res.Request.Method == "GET" && res.Request.URL.Path == "/v1/computers" {
			hp.mu.Lock()
			g := hp.list
			hp.list = nil // only the next one
			hp.mu.Unlock()
			if g != nil {
				g.wait(res.Request.Context())
			}
		}
		return nil
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			hp.mu.Lock()
			g := hp.socket
			hp.mu.Unlock()
			if g != nil {
				g.wait(r.Context())
			}
			// The proxy closes an upgraded connection when its request's context ends.
			ctx, cut := context.WithCancel(r.Context())
			defer cut()
			hp.mu.Lock()
			hp.cuts = append(hp.cuts, cut)
			hp.mu.Unlock()
			r = r.WithContext(ctx)
		}
		if strings.HasSuffix(r.URL.Path, "/terminal") {
			hp.mu.Lock()
			hp.terminals++
			hp.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	hp.url = hs.URL
	t.Cleanup(func() {
		hp.mu.Lock()
		for _, g := range []*gate{hp.socket, hp.list} {
			if g != nil {
				g.open()
			}
		}
		hp.mu.Unlock()
		hs.Close()
	})
	return hp
}

// holdSocket holds the event socket's upgrades from now on, until the gate it returns opens.
func (hp *holdProxy) holdSocket() *gate {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.socket = newGate()
	return hp.socket
}

// dropSockets ends every event socket carried so far.
func (hp *holdProxy) dropSockets() {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	for _, cut := range hp.cuts {
		cut()
	}
	hp.cuts = nil
}

// terminalUpgrades is how many terminal sockets the page asked for so far.
func (hp *holdProxy) terminalUpgrades() int {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return hp.terminals
}

// holdList holds the answer of the next GET /v1/computers until the gate it returns opens.
func (hp *holdProxy) holdList() *gate {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	hp.list = newGate()
	return hp.list
}

func TestDashboardLiveBeforeSocket(t *testing.T) {
	devtools := launchChromium(t)
	finish := make(chan struct{}) // the slow agent's model answers once this is closed
	so := newScriptedOpenAI(t, func(scriptReq) scriptReply { <-finish; return scriptReply{text: "done"} })
	answer := sync.OnceFunc(func() { close(finish) })
	t.Cleanup(answer)
	srv := newE2E(t, so, "")
	srv.createAgent(noComputer(map[string]any{"name": "slow"}))
	hp := newHoldProxy(t, srv.url)
	// start makes local machines, holds the event socket and opens a tab.
	start := func(t *testing.T, names ...string) (te *testServer, ids []string, socket *gate, p *cdpPage) {
		te = srv.with(t)
		for _, n := range names {
			ids = append(ids, te.create(map[string]any{"provider": "local", "name": n}).ID)
		}
		socket = hp.holdSocket()
		p = openPage(t, devtools)
		t.Cleanup(p.close)
		return te, ids, socket, p
	}
	stop := func(te *testServer, id string) { te.call("POST", "/v1/computers/"+id+"/stop", nil, 200, nil) }
	// The table's rows, each row's text with its status in it.
	const rows = `[...document.querySelectorAll('main tbody tr')].map((tr) => tr.innerText)`
	shows := func(name, state string) string {
		return rows + `.some((r) => r.includes(` + jsString(name) + `) && r.includes(` + jsString(state) + `))`
	}
	// gone: the machine that stopped is no longer listed as running, the other one still is.
	gone := func(keep, held string) string {
		return shows(keep, "running") + ` && !` + rows + `.some((r) => r.includes(` + jsString(held) + `))`
	}
	live := `document.getElementById('conn').textContent === 'live'`
	// stopWhileHeld stops a machine while the list's answer is held, waits for the stop's event to reach
	// the page, then lets the (stale) answer through: the list must end up without the machine.
	stopWhileHeld := func(t *testing.T, te *testServer, p *cdpPage, list *gate, id, keep, held string) {
		t.Helper()
		stop(te, id)
		eventually(t, "the stop's event in the page", func() bool { return p.sawFrame(`"computer_stopped"`, id) })
		list.open()
		p.waitFor("the view drawn", `document.querySelector('main .view[data-ready]') && `+shows(keep, "running"))
		p.waitFor("the stopped machine gone from the running list", gone(keep, held))
	}

	// The list loaded, then a machine stops, then the socket opens: the list must drop it.
	t.Run("list loaded before the socket opens", func(t *testing.T) {
		te, ids, socket, p := start(t, "keep-a", "held-a")
		p.navigate(hp.url + "/computers")
		p.waitFor("both machines running", shows("keep-a", "running")+` && `+shows("held-a", "running"))
		socket.waitArrived(t, "the page's event socket")
		stop(te, ids[1])
		socket.open()
		p.waitFor("the socket live", live)
		p.waitFor("the stopped machine gone from the running list", gone("keep-a", "held-a"))
		p.clean("list")
	})

	// One machine's page: its State must say stopped.
	t.Run("machine page loaded before the socket opens", func(t *testing.T) {
		te, ids, socket, p := start(t, "held-b")
		// A terminal socket asked for after the stop but before the page learns of it is refused
		// E_COMPUTER_FAILED (500), which the browser logs; the panel then asks the machine and waits
		// (TestDashboardTerminalStopped).
		p.mu.Lock()
		p.allow = func(s string) bool { return strings.Contains(s, "/terminal' failed") }
		p.mu.Unlock()
		p.navigate(hp.url + "/computers/" + ids[0])
		const state = `document.querySelector('main dl.kv dd').innerText`
		p.waitFor("the machine running", state+` === 'running'`)
		socket.waitArrived(t, "the page's event socket")
		stop(te, ids[0])
		socket.open()
		p.waitFor("the socket live", live)
		p.waitFor("the machine shown stopped", state+` === 'stopped'`)
		p.clean("machine page")
	})

	// The list's own answer is held past the socket's opening and the stop's event: the event comes
	// before the view listens, the answer is stale, so the view must reload once it is drawn.
	t.Run("list's load spans the socket's opening", func(t *testing.T) {
		te, ids, socket, p := start(t, "keep-c", "held-c")
		list := hp.holdList()
		p.call("Page.navigate", map[string]any{"url": hp.url + "/computers"})
		list.waitArrived(t, "the list's GET /v1/computers")
		socket.waitArrived(t, "the page's event socket")
		socket.open()
		eventually(t, "the socket's hello in the page", func() bool { return p.sawFrame(`"hello"`) })
		stopWhileHeld(t, te, p, list, ids[1], "keep-c", "held-c")
		p.clean("list spanning")
	})

	// The socket is live, the list's answer is held while a machine stops: the event comes before the
	// view listens, so the view must take it once it does.
	t.Run("an event while the list loads, the socket live", func(t *testing.T) {
		te, ids, socket, p := start(t, "keep-d", "held-d")
		socket.open()
		p.navigate(hp.url + "/approvals")
		eventually(t, "the socket's hello in the page", func() bool { return p.sawFrame(`"hello"`) })
		list := hp.holdList()
		p.clickOn(`nav a[href="/computers"]`)
		list.waitArrived(t, "the list's GET /v1/computers")
		stopWhileHeld(t, te, p, list, ids[1], "keep-d", "held-d")
		p.clean("list, socket live")
	})

	// The runs list shows a run running; it finishes before the socket opens: the row must say complete.
	t.Run("runs list loaded before the socket opens", func(t *testing.T) {
		te, _, socket, p := start(t)
		var started map[string]string
		te.call("POST", "/v1/agents/slow/run?detach=true", map[string]any{"input": "take your time"}, 202, &started)
		run := started["runId"]
		eventually(t, "the run's model call", func() bool { return len(so.requests()) > 0 })
		p.navigate(hp.url + "/runs")
		p.waitFor("the run running", shows(run, "running"))
		socket.waitArrived(t, "the page's event socket")
		answer()
		eventually(t, "the run finished", func() bool {
			return te.call("GET", "/v1/runs/"+run, nil, 200, nil).json(t)["result"].(map[string]any)["status"] != "running"
		})
		socket.open()
		p.waitFor("the socket live", live)
		p.waitFor("the run shown complete", shows(run, "complete")+` && !`+shows(run, "running"))
		p.clean("runs list")
	})
}
