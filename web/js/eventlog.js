// eventlog.js — the Events view: the recent history and the live events of WS /v1/events, newest
// first (by their time), filtered by topic, paused and resumed (events that arrive while paused are kept
// and counted, then shown), and copied as JSON (the events shown, in the socket's own shape). Keeps the
// last 500.
// Rules: the view has a socket of its own while it is shown (events.js with topics: it subscribes to
// every topic, and the server replays its buffered history after `subscribed`), opened once the page's
// shared socket has (the token is known by then). Not the shared socket: a replay there would reach every
// view as if it were live, with nothing to tell it apart. A reconnect replays the history again: an event
// already held (same at, topic, type and payload — the server encodes each event once) is not shown twice.

import { h, clear, time, toast } from './ui.js';
import { EventSocket } from './events.js';

const TOPICS = ['runs', 'computers', 'triggers', 'providers', 'adapters', 'reaper'];
const KEEP = 500;

export function render(root, ctx) {
  const events = []; // newest first
  const held = []; // arrived while paused
  const seen = new Set(); // identities of the events in events and held
  const identity = (ev) => JSON.stringify([ev.at, ev.topic, ev.type, ev.payload]);
  const shown = new Set(TOPICS);
  let paused = false;

  const list = h('ol.events.plain', { 'aria-label': 'Live events', 'aria-live': 'off' });
  const status = h('span.muted.small', { role: 'status' });
  const pauseBtn = h('button', { type: 'button', 'aria-pressed': 'false', onclick: () => setPaused(!paused) }, 'Pause');
  const copyBtn = h('button', { type: 'button', onclick: copy }, 'Copy as JSON');
  const boxes = TOPICS.map((t) => h('label.topic', h('input', { type: 'checkbox', checked: true, value: t, onchange: (e) => {
    if (e.target.checked) shown.add(t); else shown.delete(t);
    draw();
  } }), ' ', t));
  root.append(h('h1', 'Events'),
    h('section.panel', h('div.toolbar', h('fieldset.topics', h('legend', 'Topics'), boxes), pauseBtn, copyBtn, status)),
    h('section.panel', list));

  function visible() { return events.filter((ev) => shown.has(ev.topic)); }

  function row(ev) {
    const p = ev.payload || {};
    const what = p.runId || p.computerId || p.id || p.name || p.agent || p.provider || '';
    return h('li.event', { 'data-topic': ev.topic },
      time(ev.at), ' ', h('code.topic', ev.topic), ' ', h('strong', ev.type), what ? [' ', h('span.small', String(what))] : null,
      h('details', h('summary.small.muted', 'payload'), h('pre.small', JSON.stringify(p, null, 2))));
  }

  function draw() {
    const v = visible();
    clear(list, v.length ? v.map(row) : h('li.muted', paused ? 'Paused.' : 'Waiting for events…'));
    status.textContent = `${v.length} shown of ${events.length}` + (paused ? ` · paused, ${held.length} new` : '');
  }

  function setPaused(p) {
    paused = p;
    pauseBtn.textContent = p ? 'Resume' : 'Pause';
    pauseBtn.setAttribute('aria-pressed', String(p));
    if (!p) { for (const ev of held.splice(0)) add(ev); }
    draw();
  }

  // add puts ev in time order (a replay after live events, or after a reconnect, lands below newer ones);
  // of events at the same time, the one that came last is on top.
  function add(ev) {
    const i = events.findIndex((e) => e.at <= ev.at);
    if (i < 0) events.push(ev); else events.splice(i, 0, ev);
    for (const old of events.splice(KEEP)) seen.delete(identity(old));
  }

  async function copy() {
    const text = JSON.stringify(visible(), null, 2);
    try {
      await navigator.clipboard.writeText(text);
      toast(`Copied ${visible().length} events as JSON.`);
    } catch {
      // No clipboard (an insecure origin): a selected text area to copy from by hand.
      const ta = h('textarea.copy', { 'aria-label': 'Events as JSON', readonly: true, rows: 12 });
      ta.value = text;
      copyBtn.after(ta);
      ta.select();
    }
    root.dataset.copied = text; // read by the browser test
  }

  const socket = new EventSocket(null, TOPICS);
  socket.on((ev) => {
    if (!ev.topic || ev.type === 'hello' || ev.type === 'pong') return;
    const id = identity(ev);
    if (seen.has(id)) return; // replayed, and already here
    seen.add(id);
    if (paused) { held.push(ev); if (held.length > KEEP) seen.delete(identity(held.shift())); draw(); return; }
    add(ev);
    draw();
  });
  let started = false;
  const start = () => { if (!started) { started = true; socket.connect(); } };
  if (ctx.events.opens) start(); else ctx.onReconnect(start);
  ctx.cleanup(() => socket.close());
  draw();
}
