// browser.js — a machine's Browser panel (issue 28): the Chromium inside the machine, driven through the
// /v1/computers/:id/browser routes: its status (installed, version, running, the page; when missing, what
// is missing and how to get it), an address bar (goto), a live screenshot, the snapshot's elements (ref,
// role, name, value) with click and type (a text box, submit with Enter or not), and close.
//
// Entry point: browserPanel(ctx, id) → the panel's element (computers.js puts it on the machine's page).
// Rules: nothing happens until the panel is opened (opening asks the status only; Chromium starts on the
// first goto, as with the API); the screenshot refreshes only while the panel is open, the tab is visible
// and the browser runs, one request at a time, and pauses after LIVE_FOR without a hand on the panel (a
// page left open must not keep the machine's Chromium from idling out); the PNG is fetched with the token
// (api.js) and shown as a data: URL (the page's CSP allows data: images, not blob:). The open/closed choice
// is kept for the tab (sessionStorage), like the token. The status line follows the machine's events, and
// is asked afresh when the page's event socket reopens (ctx.onReconnect).

import { api, get, post, enc } from './api.js';
import { h, clear, fail, table, toast, download, dataURL } from './ui.js';

const LIVE_EVERY = 1500; // ms between the end of one screenshot and the next request
const LIVE_FOR = 5 * 60 * 1000; // the live view pauses after this long without an action in the panel
const OPEN_KEY = 'agentd.browserPanel';
const EDITABLE = new Set(['textbox', 'searchbox', 'combobox', 'spinbutton', 'textarea']);

export function browserPanel(ctx, id) {
  const base = '/v1/computers/' + enc(id) + '/browser';
  let open = false, running = false, installed = true, closed = false;
  let timer = 0, inflight = null, again = false, lastAction = Date.now(), nodes = [], lastShot = null;
  let version = '', page = ''; // the status line: Chromium's version, the page (title or URL)

  const toggle = h('button', { type: 'button', 'aria-expanded': 'false', 'aria-controls': 'browser-body' }, 'Open');
  const state = h('span.small.muted.browser-state', { role: 'status' });
  const progress = h('span.small.muted.browser-progress', { 'aria-live': 'polite' }); // browser_progress events
  const body = h('div#browser-body', { hidden: true });
  const missing = h('div.panel.error', { role: 'alert', hidden: true });

  const addr = h('input', { type: 'text', placeholder: 'localhost:8000/ (the machine\'s own)', 'aria-label': 'Address', autocomplete: 'off', spellcheck: 'false', style: 'flex:1;min-width:12rem' });
  const goBtn = h('button.primary', { type: 'submit' }, 'Go');
  const closeBtn = h('button.danger', { type: 'button', onclick: () => closeBrowser() }, 'Close browser');
  const gotoForm = h('form.row.browser-goto', { onsubmit: (e) => { e.preventDefault(); go(); } }, addr, goBtn, closeBtn);

  const img = h('img.shot', { alt: 'The page in the machine\'s browser', hidden: true });
  const live = h('span.small.muted.browser-live');
  const refreshBtn = h('button', { type: 'button', onclick: () => { touch(); shot(); } }, 'Refresh');
  const saveBtn = h('button', { type: 'button', disabled: true, onclick: () => lastShot && download(lastShot, 'screenshot.png') }, 'Save PNG');
  const shotNote = h('p.small.muted', 'No page yet: enter an address above.');

  const filter = h('input', { type: 'search', placeholder: 'filter', 'aria-label': 'Filter the elements', style: 'flex:1;min-width:6rem' });
  const snapBtn = h('button', { type: 'button', onclick: () => act(() => post(base + '/snapshot', {})) }, 'Snapshot');
  const count = h('span.small.muted');
  const list = h('div.snapshot');

  const typeRef = h('input', { placeholder: 'e12', 'aria-label': 'Ref to type into', autocomplete: 'off', spellcheck: 'false', style: 'width:6rem' });
  const typeText = h('input', { placeholder: 'text to type', 'aria-label': 'Text to type', autocomplete: 'off', style: 'flex:1;min-width:8rem' });
  const submit = h('input', { type: 'checkbox', id: 'browser-submit-' + id });
  const typeBtn = h('button', { type: 'submit' }, 'Type');
  const typeForm = h('form.row.browser-type', { onsubmit: (e) => {
    e.preventDefault();
    const ref = typeRef.value.trim();
    if (!ref) { typeRef.focus(); return; }
    act(() => post(base + '/type', { ref, text: typeText.value, submit: submit.checked })).then((r) => { if (r) typeText.value = ''; });
  } }, typeRef, typeText, h('span', submit, h('label', { for: submit.id, style: 'display:inline' }, ' submit (Enter)')), typeBtn);

  const controls = [addr, goBtn, closeBtn, refreshBtn, snapBtn, typeRef, typeText, submit, typeBtn];
  clear(body, missing, gotoForm,
    h('div.browser-grid',
      h('div', h('div.row', h('h3', 'Screen'), h('span.spacer'), live, refreshBtn, saveBtn), img, shotNote),
      h('div', h('div.row', h('h3', 'Elements'), count, h('span.spacer'), snapBtn), h('div.row', filter), list, typeForm)));
  const panel = h('section.panel.browser-panel', { 'aria-label': 'Browser' },
    h('div.row', h('h2', 'Browser'), state, progress, h('span.spacer'), toggle), body);

  const touch = () => { lastAction = Date.now(); };
  const busy = (b) => { for (const c of controls) c.disabled = b || !installed; };
  const drawState = () => {
    if (!installed || !version) { state.textContent = installed ? '' : 'not installed'; return; } // no status asked yet, or no Chromium
    state.textContent = [version, running ? 'running' : 'not running (it starts on the first address)', running ? page : ''].filter(Boolean).join(' · ');
  };

  function setOpen(v) {
    open = v;
    body.hidden = !v;
    toggle.textContent = v ? 'Hide' : 'Open';
    toggle.setAttribute('aria-expanded', String(v));
    sessionStorage.setItem(OPEN_KEY, v ? '1' : '');
    if (v) { touch(); status().catch((e) => { state.textContent = 'status failed: ' + e.message; }); } else stop();
  }
  toggle.addEventListener('click', () => setOpen(!open));

  async function status() {
    state.textContent = 'checking…';
    const st = await get(base + '/status');
    if (closed) return;
    installed = st.installed;
    running = st.installed && st.running;
    missing.hidden = st.installed;
    if (!st.installed) {
      clear(missing, h('strong', 'This machine has no Chromium.'), ' ', st.hint || '');
      drawState();
    } else {
      version = st.version || 'Chromium';
      page = st.title || st.url || '';
      drawState();
      if (st.url && !addr.value) addr.value = st.url;
    }
    busy(false);
    if (running && open) { if (!nodes.length) act(() => post(base + '/snapshot', {}), true); else shot(); }
  }

  function stop() { clearTimeout(timer); timer = 0; }

  // schedule the next screenshot when everything says live: open, visible, running, used lately.
  function schedule() {
    stop();
    if (closed || !open || !running || document.hidden) return;
    if (Date.now() - lastAction > LIVE_FOR) {
      clear(live, 'paused (5 min unused) ', h('button', { type: 'button', onclick: () => { touch(); shot(); } }, 'Resume'));
      return;
    }
    live.textContent = 'live';
    timer = setTimeout(shot, LIVE_EVERY);
  }

  // shot takes the screen now, one request at a time (inflight: the one on its way; asked meanwhile, one
  // more follows it at once, so the screen after an action is never the one before it), then schedules.
  function shot() {
    stop();
    if (closed || !open) return null;
    if (inflight) { again = true; return inflight; }
    panel.dataset.inflight = '1'; // read by the browser test: a screenshot is on its way
    inflight = takeShot().finally(() => {
      inflight = null; delete panel.dataset.inflight;
      if (again && running) { again = false; shot(); }
    });
    return inflight;
  }
  async function takeShot() {
    try {
      const blob = await api('GET', base + '/screenshot', undefined, { blob: true });
      if (closed) return;
      img.src = await dataURL(blob);
      img.hidden = false; shotNote.hidden = true;
      lastShot = blob; saveBtn.disabled = false;
    } catch (e) {
      live.textContent = 'screenshot failed: ' + (e.code ? e.code + ': ' : '') + e.message;
      return; // no loop on an error: Refresh tries again
    }
    schedule();
  }

  function drawNodes() {
    const q = filter.value.trim().toLowerCase();
    const shown = q ? nodes.filter((n) => (n.ref + ' ' + n.role + ' ' + n.name + ' ' + (n.value || '')).toLowerCase().includes(q)) : nodes;
    count.textContent = nodes.length ? `${shown.length} of ${nodes.length}` : '';
    clear(list, table([
      ['Ref', (n) => h('code', n.ref)],
      ['Role', (n) => h('span.small', n.role)],
      ['Name', (n) => h('span', n.name, n.value ? h('span.muted', ' = ' + JSON.stringify(n.value)) : null)],
      ['', (n) => h('div.row',
        h('button.click', { type: 'button', disabled: !installed, 'aria-label': `Click ${n.role} ${n.name || n.ref}`, onclick: () => act(() => post(base + '/click', { ref: n.ref })) }, 'Click'),
        EDITABLE.has(n.role) ? h('button.type', { type: 'button', 'aria-label': `Type into ${n.role} ${n.name || n.ref}`, onclick: () => { typeRef.value = n.ref; typeText.focus(); typeText.select(); } }, 'Type…') : null)],
    ], shown, { label: 'Page elements', key: (n) => n.ref, empty: nodes.length ? 'Nothing matches.' : 'No snapshot yet.' }));
  }
  filter.addEventListener('input', drawNodes);

  // act runs one browser call; an answer with nodes (snapshot, click, type) redraws the list, then the
  // screen is taken at once.
  async function act(call, quiet) {
    touch();
    busy(true);
    try {
      const res = await call();
      if (closed) return;
      running = true;
      if (res && res.nodes) {
        nodes = res.nodes; drawNodes();
        if (res.truncated) count.textContent += ' (more not shown)';
      }
      if (res && res.url && (res.url !== addr.value || res.title)) page = res.title || res.url; // a new page (a snapshot has no title)
      if (res && res.url) addr.value = res.url;
      drawState();
      progress.textContent = ''; // starting, ready: told while it happened
      shot();
      return res;
    } catch (e) { if (!quiet) fail(e); } finally { busy(false); }
  }

  async function go() {
    let url = addr.value.trim();
    if (!url) return;
    // No scheme (localhost:8000, //host/x): http, as an address bar does. The page itself loads nothing from it.
    if (!/^([a-z][a-z0-9+.-]*:\/\/|about:)/i.test(url)) url = 'http:' + (url.startsWith('//') ? '' : '//') + url;
    addr.value = url;
    state.textContent = 'opening ' + url + '…';
    const g = await act(() => post(base + '/goto', { url }));
    if (!g) { drawState(); return; }
    page = (g.title || g.url) + (g.status ? ' · ' + g.status : '') + (g.loaded ? '' : ' · not loaded');
    drawState();
    if (g.error) toast('The page did not load: ' + g.error, true);
    await act(() => post(base + '/snapshot', {}));
  }

  async function closeBrowser() {
    touch();
    busy(true);
    running = false; again = false; stop();
    try {
      await inflight; // a screenshot on its way ends first, not with the browser under it
      await api('DELETE', base);
      nodes = []; drawNodes();
      img.hidden = true; shotNote.hidden = false; shotNote.textContent = 'The browser is closed; an address starts it again.';
      live.textContent = '';
      toast('Browser closed');
      await status();
    } catch (e) { fail(e); } finally { busy(false); }
  }

  const onVisible = () => { if (!document.hidden && open && running) shot(); else if (document.hidden) stop(); };
  document.addEventListener('visibilitychange', onVisible);
  ctx.cleanup(() => { closed = true; stop(); document.removeEventListener('visibilitychange', onVisible); });
  ctx.on((ev) => {
    const p = ev.payload || {};
    if (ev.topic !== 'computers' || (p.computerId !== id && p.id !== id)) return;
    if (ev.type === 'browser_progress') {
      progress.textContent = p.message ? '— ' + p.message : '';
      if (/stopped/i.test(p.message || '')) { running = false; stop(); live.textContent = 'stopped'; drawState(); }
    } else if (ev.type === 'computer_destroyed' || (p.state && p.state !== 'running')) { running = false; stop(); drawState(); }
  });
  // The status line is kept by events (browser_progress, the machine's state): once the status was asked
  // (the panel opened), each (re)open of the event socket asks it afresh, for what changed while the page
  // had no socket.
  ctx.onReconnect(() => { if (version && !closed) status().catch((e) => { state.textContent = 'status failed: ' + e.message; }); });
  drawNodes();
  if (sessionStorage.getItem(OPEN_KEY) === '1') setOpen(true);
  return panel;
}
