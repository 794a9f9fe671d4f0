//go:build linux

package main

// What the dashboard shows across a lost event socket and a stopped machine, in a real Chromium behind a
// test proxy (holdProxy, web_live_test.go: it cuts the event sockets and holds their reconnection, and
// counts the terminal sockets asked for): the Events view shows the server's recent history when it opens
// and what came while the page had no socket once it is back, each event once; the Browser panel's
// status line is asked afresh when the socket comes back; the terminal of a stopped machine says so
// (with Start) and asks for no socket until the machine runs.
//
// Entry points: TestDashboardEventsHistory, TestDashboardBrowserPanelReconnect,
// TestDashboardTerminalStopped.

import (
	"fmt"
	"strings"
	"testing"
)

const pageLive = `document.getElementById('conn').textContent === 'live'`

// cutSocket cuts the page's event sockets and holds their reconnection: the gate it returns lets them
// through.
func cutSocket(t *testing.T, hp *holdProxy, p *cdpPage) *gate {
	t.Helper()
	socket := hp.holdSocket()
	hp.dropSockets()
	p.waitFor("the page offline", `document.getElementById('conn').textContent.startsWith('offline')`)
	socket.waitArrived(t, "the page's event socket, reconnecting")
	return socket
}

func TestDashboardEventsHistory(t *testing.T) {
	devtools := launchChromium(t)
	te := newTestServer(t, withHostEnv)
	hp := newHoldProxy(t, te.url)
	m := te.create(map[string]any{"provider": "local", "name": "history-box"}) // before the page: history
	p := openPage(t, devtools)
	t.Cleanup(p.close)
	p.navigate(hp.url + "/events")
	// rows: how many rows of the view are this machine's events of a type.
	rows := func(typ string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('li.event')].filter((li) => li.querySelector('strong').innerText === %s && li.innerText.includes(%s)).length`,
			jsString(typ), jsString(m.ID))
	}
	p.waitFor("the machine's creation, from before the page opened", rows("computer_created")+` === 1`)
	p.waitFor("the socket live", pageLive)

	// The socket is cut; the machine stops meanwhile; once it is back, the view shows the stop, and
	// the history replayed again is not shown twice.
	socket := cutSocket(t, hp, p)
	te.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	socket.open()
	p.waitFor("the socket live again", pageLive)
	p.waitFor("the stop that came while offline", rows("computer_stopped")+` === 1`)
	if n := p.eval(rows("computer_created")); n != 1.0 {
		t.Fatalf("after the reconnect the machine's creation is shown %v times, want once: %v", n, p.eval(`document.querySelector('ol.events').innerText`))
	}
	// Live events still come, once each.
	te.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
	p.waitFor("a live event after the reconnect", rows("computer_started")+` === 1`)
	p.clean("events history")
}

// The Browser panel's status line says Chromium runs; the socket is cut and the browser closed meanwhile
// (its "Chromium stopped" event is lost): once the socket is back the line must say it is not running.
func TestDashboardBrowserPanelReconnect(t *testing.T) {
	devtools, te, m := browserPanelMachine(t)
	te.call("POST", "/v1/computers/"+m.ID+"/browser/goto", map[string]any{"url": "about:blank"}, 200, nil)
	hp := newHoldProxy(t, te.url)
	p := openPage(t, devtools)
	t.Cleanup(p.close)
	p.navigate(hp.url + "/computers/" + m.ID)
	state := `document.querySelector('.browser-state').innerText`
	toggle := `.browser-panel button[aria-controls="browser-body"]`
	p.waitFor("the page settled", `document.querySelector('.browser-panel') && document.querySelector('main').innerText.includes('Upload to this folder')`)
	p.clickOn(toggle)
	p.waitFor("the status: running", `/Chromium/.test(`+state+`) && / running/.test(`+state+`) && !/not running/.test(`+state+`)`)
	// Hidden, the panel takes no screenshots (which would start Chromium again): only its line shows.
	p.clickOn(toggle)
	p.waitFor("the panel hidden", `document.getElementById('browser-body').hidden && !document.querySelector('.browser-panel').dataset.inflight`)
	p.waitFor("the socket live", pageLive)

	socket := cutSocket(t, hp, p)
	te.call("DELETE", "/v1/computers/"+m.ID+"/browser", nil, 204, nil)
	socket.open()
	p.waitFor("the socket live again", pageLive)
	p.waitFor("the status: not running", `/not running/.test(`+state+`)`)
	p.clean("browser panel reconnect")
}

// A stopped machine's page: the terminal says the machine is stopped, offers Start and asks for no socket
// (the server would refuse it with E_COMPUTER_FAILED), nor does the file browser ask for the files; Start
// connects it and lists them. Stopped again while connected, it says so again without asking; started
// through the API (its event), it connects again.
func TestDashboardTerminalStopped(t *testing.T) {
	devtools := launchChromium(t)
	te := newTestServer(t, withHostEnv)
	hp := newHoldProxy(t, te.url)
	m := te.create(map[string]any{"provider": "local", "name": "term-box"})
	te.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	p := openPage(t, devtools)
	t.Cleanup(p.close)
	p.navigate(hp.url + "/computers/" + m.ID)
	const note = `document.querySelector('.term-note')`
	const status = `document.querySelector('.term').closest('section').querySelector('.row > span:last-child').innerText`
	stopped := note + ` && !` + note + `.hidden && ` + note + `.innerText.includes('stopped')`
	p.waitFor("the terminal saying the machine is stopped, with Start", stopped+` && !`+note+`.querySelector('button').hidden && `+note+`.querySelector('button').innerText === 'Start'`)
	p.waitFor("the socket live", pageLive)
	// The file browser does not ask either (a 500 in the console would fail p.clean).
	p.waitFor("the files saying the machine is stopped", `document.querySelector('main').innerText.includes('its files are listed once it runs')`)
	if n := hp.terminalUpgrades(); n != 0 {
		t.Fatalf("the terminal of a stopped machine asked for %d sockets", n)
	}
	p.clickOn(`.term-note button`)
	p.waitFor("the terminal connected after Start", status+` === 'connected' && `+note+`.hidden`)
	p.waitFor("the files listed after Start", `document.querySelector('main .crumbs a') && !document.querySelector('main').innerText.includes('its files are listed once it runs')`)
	if n := hp.terminalUpgrades(); n != 1 {
		t.Fatalf("Start: %d terminal sockets asked for, want 1", n)
	}
	p.clean("start")

	te.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	p.waitFor("the terminal saying the machine is stopped again", stopped)
	te.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
	p.waitFor("the terminal connected again", status+` === 'connected' && `+note+`.hidden`)
	if n := hp.terminalUpgrades(); n != 2 {
		t.Fatalf("stop then start: %d terminal sockets asked for in all, want 2", n)
	}
	if text := fmt.Sprint(p.eval(`document.querySelector('.term').innerText`)); !strings.Contains(text, "[the machine is stopped]") {
		t.Fatalf("the terminal did not say the machine stopped: %q", text)
	}
	p.clean("stop and start")
}
