//go:build linux

package main

import (
	"fmt"
	"testing"
)

// The dashboard's Events view in a real Chromium: live events of every topic as they happen, a topic
// filter, pause (what arrives is held and counted, then shown on resume), and copy as JSON (the events
// shown, in the socket's shape).
func TestDashboardEventsView(t *testing.T) {
	devtools := launchChromium(t)
	te := newTestServer(t, withHostEnv)
	p := openPage(t, devtools)
	p.viewport(1280, 800)
	p.navigate(te.url + "/events")
	p.waitFor("the events view", `document.querySelector('.view[data-ready]') && document.querySelector('main h1').innerText === 'Events' && document.querySelector('nav a[href="/events"][aria-current]')`)
	// The page opens its event socket only after its first call (app.js), possibly after the view is
	// ready: an event published before the socket subscribed is not a live one, so wait for it.
	eventually(t, "the page's event socket subscribed", func() bool {
		te.s.hub.mu.Lock()
		defer te.s.hub.mu.Unlock()
		return len(te.s.hub.subs) > 0
	})
	// Two topics: an agent saved (triggers), a machine made (computers).
	te.createAgent(map[string]any{"name": "watched", "computer": map[string]any{"enabled": false}, "tools": []string{}})
	m := te.create(map[string]any{"provider": "local", "name": "events-box"})
	p.waitFor("live events of both topics", `document.querySelector('li.event[data-topic="triggers"]') && [...document.querySelectorAll('li.event[data-topic="computers"]')].some((li) => li.innerText.includes('`+m.ID+`'))`)
	// The filter: triggers off hides them.
	p.eval(`(() => { const b = document.querySelector('.topics input[value="triggers"]'); b.click(); return true; })()`)
	p.waitFor("triggers filtered out", `!document.querySelector('li.event[data-topic="triggers"]') && document.querySelector('li.event[data-topic="computers"]')`)
	// Copy as JSON: exactly the events shown.
	p.clickOn(`main .toolbar button:nth-of-type(2)`)
	p.waitFor("copied", `(() => { const c = document.querySelector('.view').dataset.copied; if (!c) return false; const a = JSON.parse(c); return a.length > 0 && a.every((e) => e.topic === 'computers' && e.type && e.at) && a.some((e) => JSON.stringify(e.payload).includes('`+m.ID+`')); })()`)
	// Pause: a new machine's events are held and counted, not shown; resume shows them.
	p.clickOn(`main .toolbar button[aria-pressed]`)
	p.waitFor("paused", `document.querySelector('main .toolbar button[aria-pressed="true"]').innerText === 'Resume'`)
	before := p.eval(`document.querySelectorAll('li.event').length`)
	te.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	p.waitFor("held while paused", `/paused, [1-9]\d* new/.test(document.querySelector('main .toolbar [role=status]').innerText)`)
	if after := p.eval(`document.querySelectorAll('li.event').length`); after != before {
		t.Fatalf("events drawn while paused: %v -> %v", before, after)
	}
	p.clickOn(`main .toolbar button[aria-pressed]`)
	p.waitFor("shown on resume", `document.querySelectorAll('li.event').length > `+fmt.Sprint(before)+` && !/paused/.test(document.querySelector('main .toolbar [role=status]').innerText)`)
	p.clean("events")
}
