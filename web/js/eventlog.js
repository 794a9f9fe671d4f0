// eventlog.js — the Events view: the live events of WS /v1/events as they come, newest first, filtered
// by topic, paused and resumed (events that arrive while paused are kept and counted, then shown), and
// copied as JSON (the events shown, in the socket's own shape). Keeps the last 500.

import { h, clear, time, toast } from './ui.js';

const TOPICS = ['runs', 'computers', 'triggers', 'providers', 'adapters', 'reaper'];
const KEEP = 500;

export function render(root, ctx) {
  const events = []; // newest first
  const held = []; // arrived while paused
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

  function add(ev) {
    events.unshift(ev);
    if (events.length > KEEP) events.length = KEEP;
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

  ctx.on((ev) => {
    if (!ev.topic || ev.type === 'hello' || ev.type === 'pong') return;
    if (paused) { held.push(ev); if (held.length > KEEP) held.shift(); draw(); return; }
    add(ev);
    draw();
  });
  draw();
}
