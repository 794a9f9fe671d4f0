// computers.js — machines: the list (live through the computers topic) with create, stop/start and
// destroy; one machine's page with a real terminal (xterm.js, vendored, over WS .../terminal: a shell on a
// pseudo-terminal where the provider has one, else one command per line edited locally), an exec console streaming stdout/stderr, a file
// browser (list, enter, download a file or a directory as tar.gz, upload, delete), exposed ports, and the
// Browser panel (browser.js: the machine's Chromium). The page feeds the machine's state (its load, its
// events, its reloads) to the terminal and the file browser, which ask nothing of a machine not running
// (it would refuse) and say so — a stopped one with Start — then connect and list once it runs.

import { get, post, api, stream, enc, socketURL } from './api.js';
import { h, clear, badge, time, table, fail, toast, errorBox, field, download, json, latest } from './ui.js';
import { browserPanel } from './browser.js';

// workLostOnStop: docker and podman keep a non-persistent machine's /work in memory, kubernetes in the pod
// a stop deletes (the CLI's workLostOnStop, cli_computers.go, says the same).
export function workLostOnStop(c) {
  return !(c.spec && c.spec.persist) && ['docker', 'podman', 'kubernetes'].includes(c.provider);
}
export const stopWarning = (c) => `Stop ${c.name || c.id}? Its /work is in memory (persist: false): stopping empties it, and starting it again gives an empty /work.`;

export function render(root, ctx, id) {
  return ctx.mode === 'detail' ? detail(root, ctx, id) : list(root, ctx);
}

async function list(root, ctx) {
  const body = h('div');
  const all = h('input', { type: 'checkbox', id: 'c-all' });
  const name = h('input', { placeholder: 'optional', autocomplete: 'off' });
  const provider = h('select', h('option', { value: '' }, 'default'));
  const flavor = h('select', ['base', 'python', 'node', 'full'].map((f) => h('option', { value: f }, f)));
  const createBtn = h('button.primary', { type: 'submit' }, 'Create machine');
  root.append(h('h1', 'Computers'),
    h('section.panel', h('h2', 'New machine'),
      h('form', { onsubmit: (e) => { e.preventDefault(); create(); } },
        h('div.fields', field('Name', name), field('Provider', provider), field('Flavor', flavor), h('div.field', createBtn)))),
    h('section.panel', h('div.row', h('h2', 'Machines'), h('span.spacer'), all, h('label', { for: 'c-all', style: 'display:inline' }, 'show stopped')), body));
  get('/v1/doctor').then((d) => {
    for (const p of d.providers) provider.append(h('option', { value: p.name, disabled: !p.available }, p.name + (p.available ? '' : ' (unavailable)')));
  }).catch(() => {});

  async function act(c, what) {
    try {
      if (what === 'destroy') {
        if (!confirm(`Destroy ${c.name || c.id}? Its files are gone.`)) return;
        await api('DELETE', '/v1/computers/' + enc(c.id));
      } else {
        if (what === 'stop' && workLostOnStop(c) && !confirm(stopWarning(c))) return;
        await post('/v1/computers/' + enc(c.id) + '/' + what);
      }
      toast(`${what}: ${c.name || c.id}`);
      load();
    } catch (e) { fail(e); }
  }
  const turn = latest();
  async function load() {
    const mine = turn();
    const { computers } = await get('/v1/computers' + (all.checked ? '?all=true' : ''));
    if (!ctx.alive() || !mine()) return;
    clear(body, table([
      ['Machine', (c) => h('a', { href: '/computers/' + enc(c.id) }, h('strong', c.name || c.id))],
      ['State', (c) => badge(c.state, c.state + ' machine')],
      ['Provider', (c) => h('span', c.provider, h('span.muted.small', ' ' + (c.isolationKind || '')))],
      ['Image', (c) => h('span.small', c.image), 'hide-narrow'],
      ['Last used', (c) => time(c.lastUsedAt), 'hide-narrow'],
      ['', (c) => h('div.row',
        c.state === 'stopped' ? h('button', { type: 'button', onclick: () => act(c, 'start') }, 'Start') : h('button', { type: 'button', onclick: () => act(c, 'stop'), disabled: c.state !== 'running' }, 'Stop'),
        h('button.danger', { type: 'button', onclick: () => act(c, 'destroy') }, 'Destroy'))],
    ], computers, { onRow: (c) => ctx.go('/computers/' + enc(c.id)), label: 'Machines', empty: 'No machines. Create one above, or let an agent with a computer make its own.' }));
  }
  async function create() {
    createBtn.disabled = true; createBtn.textContent = 'Creating…';
    try {
      const spec = { flavor: flavor.value };
      if (name.value.trim()) spec.name = name.value.trim();
      if (provider.value) spec.provider = provider.value;
      const c = await post('/v1/computers', spec);
      toast('Created ' + (c.name || c.id));
      name.value = '';
      load();
    } catch (e) { fail(e); }
    createBtn.disabled = false; createBtn.textContent = 'Create machine';
  }
  all.addEventListener('change', () => load().catch(fail));
  await load();
  ctx.on((ev) => { if (ev.topic === 'computers' || ev.topic === 'reaper') load().catch(() => {}); });
  ctx.onReconnect(() => load().catch(() => {}));
}

async function detail(root, ctx, id) {
  let c, drawInfo;
  try { c = await get('/v1/computers/' + enc(id)); } catch (e) { root.append(h('a', { href: '/computers' }, '← Computers'), errorBox(e)); return; }
  const info = h('div');
  const drawDetails = () => clear(info, h('dl.kv',
    h('dt', 'State'), h('dd', badge(c.state, c.state + ' machine'), c.error ? h('span.error', ' ' + c.error) : null),
    h('dt', 'Provider'), h('dd', `${c.provider} (${c.isolated ? 'isolated' : 'not isolated'}: ${c.isolationKind})`),
    h('dt', 'Image'), h('dd', c.image || ''), h('dt', 'Workdir'), h('dd', h('code', c.workdir)),
    h('dt', 'Created'), h('dd', time(c.createdAt)), c.expiresAt ? [h('dt', 'Expires'), h('dd', time(c.expiresAt))] : null,
    h('dt', 'Ports'), h('dd', Object.keys(c.ports || {}).length ? Object.entries(c.ports).map(([p, b]) => h('div', p, ' → ', h('a', { href: b.url, target: '_blank', rel: 'noopener' }, b.url))) : h('span.muted', 'none'))));
  const terminal = terminalPanel(ctx, id, c.state, () => reload());
  const files = filesPanel(ctx, id, c.workdir || '/work');
  drawInfo = () => { drawDetails(); terminal.machine(c.state); files.machine(c.state); };
  drawInfo();
  const portIn = h('input', { type: 'number', min: 1, max: 65535, placeholder: '8080', style: 'width:7rem', 'aria-label': 'Port' });
  root.append(h('div.row', h('a', { href: '/computers' }, '← Computers')), h('h1', 'Machine ', h('code', c.name || c.id)));
  const grid = h('div.grid');
  root.append(terminal.panel, grid);
  grid.append(h('section.panel', h('h2', 'Machine'), info,
    h('form.row', { style: 'margin-top:.6rem', onsubmit: async (e) => {
      e.preventDefault();
      try { const b = await post('/v1/computers/' + enc(id) + '/ports', { port: +portIn.value }); toast('Exposed at ' + b.url); c = await get('/v1/computers/' + enc(id)); drawInfo(); } catch (er) { fail(er); }
    } }, portIn, h('button', { type: 'submit' }, 'Expose port'))));
  // An event carries the machine's whole state and is newer than a reload still in flight (turn).
  const turn = latest();
  ctx.on((ev) => {
    if (ev.topic === 'computers' && ev.payload && (ev.payload.id === id || ev.payload.computerId === id)) {
      if (ev.type === 'computer_destroyed') { turn(); c.state = 'destroyed'; drawInfo(); return; }
      if (ev.payload.state) { turn(); c = ev.payload; drawInfo(); }
      else if (ev.type === 'computer_stopped') { turn(); c.state = 'stopped'; drawInfo(); } // kubernetes' pod sweep: no state in it
    }
  });
  // reload asks the machine afresh: on each (re)open of the event socket, and when the terminal's socket
  // ended (was it stopped?).
  async function reload() {
    const mine = turn();
    try {
      const fresh = await get('/v1/computers/' + enc(id));
      if (ctx.alive() && mine()) { c = fresh; drawInfo(); }
    } catch (e) {
      if (e.status === 404 && ctx.alive() && mine()) { c.state = 'destroyed'; drawInfo(); }
    }
  }
  ctx.onReconnect(() => reload());

  grid.append(execPanel(ctx, id));
  grid.append(files.panel);
  root.append(browserPanel(ctx, id));
}

// terminalPanel: xterm.js over the terminal socket. First it asks for a shell on a pseudo-terminal (tty
// frames: keystrokes as stdin, the panel's size as resize); where the provider has none (local, sandbox:
// E_NOT_IMPLEMENTED) each line typed is one command (the socket runs one command per message); history
// with ↑/↓, Ctrl+C clears the line, Ctrl+L clears the screen.
// The socket is asked for only while the machine runs (its page tells: machine(state), from its load, its
// events and its reloads): a machine not running refuses it (E_COMPUTER_FAILED), so the panel says so,
// with Start for a stopped one, and connects when it runs again. A socket that ends makes the page ask the
// machine afresh (refresh); while it runs, the panel reconnects after 2 s, doubling to 15 s.
// Returns { panel, machine(state) }.
function terminalPanel(ctx, id, state0, refresh) {
  const box = h('div.term', { 'aria-label': 'Terminal' });
  const status = h('span.small.muted', 'connecting…');
  const startBtn = h('button', { type: 'button', onclick: async () => {
    startBtn.disabled = true;
    try { await post('/v1/computers/' + enc(id) + '/start'); toast('start: ' + id); await refresh(); } catch (e) { fail(e); } finally { startBtn.disabled = false; }
  } }, 'Start');
  const noteText = h('span');
  const note = h('div.row.term-note', { role: 'status', hidden: true }, noteText, startBtn);
  const panel = h('section.panel', h('div.row', h('h2', 'Terminal'), h('span.spacer'), status), note, box);
  if (!document.querySelector('link[href="/vendor/xterm/xterm.css"]')) document.head.append(h('link', { rel: 'stylesheet', href: '/vendor/xterm/xterm.css' }));
  let ws = null, term = null, closed = false;
  let machineState = state0, connect = null, retry = 0, fails = 0;
  ctx.cleanup(() => { closed = true; clearTimeout(retry); ws?.close(); term?.dispose(); });
  // want connects when the machine runs and no socket is open or on its way; else it says why not.
  const want = () => {
    if (closed) return;
    const up = machineState === 'running';
    note.hidden = up || machineState === 'creating';
    if (!up) {
      clearTimeout(retry); retry = 0;
      if (ws) { const old = ws; ws = null; old.close(); term?.write('\r\n\x1b[33m[the machine is ' + machineState + ']\x1b[0m\r\n'); }
      status.textContent = machineState === 'creating' ? 'waiting for the machine…' : 'machine ' + machineState; status.className = 'small muted';
      noteText.textContent = machineState === 'stopped' ? 'The machine is stopped: the terminal connects once it runs again. ' :
        `The machine is not running (${machineState}): there is no terminal to connect to.`;
      startBtn.hidden = machineState !== 'stopped';
      return;
    }
    if (!connect || ws || retry) return;
    retry = setTimeout(() => { retry = 0; if (!closed && machineState === 'running' && !ws) connect(); },
      fails ? Math.min(2000 * 2 ** (fails - 1), 15000) : 0);
  };
  import('/vendor/xterm/xterm.mjs').then(({ Terminal }) => {
    if (closed) return;
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    term = new Terminal({ convertEol: true, cursorBlink: true, fontSize: 13, scrollback: 2000,
      fontFamily: 'ui-monospace, Menlo, Consolas, monospace', theme: { background: '#000000', foreground: dark ? '#e7e7ea' : '#dddddd' } });
    term.open(box);
    const fit = () => {
      const cell = box.querySelector('.xterm-rows > div');
      const w = box.clientWidth - 8, hgt = box.clientHeight - 8;
      const cw = cell ? (term._core?._renderService?.dimensions?.css?.cell?.width || 7.8) : 7.8;
      const ch = term._core?._renderService?.dimensions?.css?.cell?.height || 17;
      const cols = Math.max(20, Math.floor(w / cw)), rows = Math.max(5, Math.floor(hgt / ch));
      if (cols !== term.cols || rows !== term.rows) {
        term.resize(cols, rows);
        if (ws && ws.readyState === 1) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
      }
    };
    const ro = new ResizeObserver(() => fit());
    ro.observe(box);
    ctx.cleanup(() => ro.disconnect());
    let line = '', busy = false, workdir = '', hist = [], hi = 0;
    let mode = 'pending'; // pending (asked for a tty shell), tty, ended (the shell exited), line
    const prompt = () => term.write(`\x1b[32m${workdir || '$'}\x1b[0m $ `);
    const shell = () => {
      mode = 'pending';
      ws.send(JSON.stringify({ type: 'exec', cmd: ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'], tty: true, cols: term.cols, rows: term.rows }));
    };
    connect = () => {
      const sock = new WebSocket(socketURL('/v1/computers/' + enc(id) + '/terminal'));
      ws = sock;
      status.textContent = 'connecting…'; status.className = 'small muted';
      ws.onmessage = (m) => {
        let f; try { f = JSON.parse(m.data); } catch { return; }
        if (f.type === 'ready') { fails = 0; workdir = f.workdir || ''; status.textContent = 'connected'; status.className = 'small ok'; fit(); shell(); }
        else if (f.type === 'started') { mode = 'tty'; term.options.convertEol = false; } // a pty sends its own \r\n
        else if (mode === 'pending' && f.type === 'error') { mode = 'line'; term.options.convertEol = true; prompt(); } // no tty here: one command per line
        else if (mode === 'tty' && f.type === 'exit') { mode = 'ended'; term.write(`\r\n\x1b[33m[the shell exited${f.exitCode ? ' (' + f.exitCode + ')' : ''}: press Enter for a new one]\x1b[0m\r\n`); }
        else if (f.type === 'stdout') term.write(f.data);
        else if (f.type === 'stderr') term.write('\x1b[31m' + f.data + '\x1b[0m');
        else if (f.type === 'exit') { busy = false; if (f.exitCode) term.write(`\x1b[33m[exit ${f.exitCode}]\x1b[0m\r\n`); prompt(); }
        else if (f.type === 'error') { busy = false; term.write('\x1b[31m' + (f.error && (f.error.code + ': ' + f.error.message) || 'error') + '\x1b[0m\r\n'); prompt(); }
      };
      ws.onclose = () => {
        if (closed || ws !== sock) return; // left, or closed by want (the machine is not running)
        ws = null; fails++;
        status.textContent = 'disconnected — reconnecting'; status.className = 'small error';
        term.write('\r\n\x1b[31m[disconnected]\x1b[0m\r\n');
        refresh().finally(want); // stopped meanwhile? then it waits for the machine to run
      };
    };
    want();
    term.onData((d) => {
      if (!ws || ws.readyState !== 1) return; // not connected: nothing to send to
      if (mode === 'tty') { ws.send(JSON.stringify({ type: 'stdin', data: d })); return; }
      if (mode === 'ended') { if (d.includes('\r')) shell(); return; }
      if (mode === 'pending' || busy) return;
      if (d.startsWith('\x1b')) { // arrows: history; other escape sequences are ignored
        if (d === '\x1b[A' || d === '\x1b[B') {
          hi = Math.max(0, Math.min(hist.length, hi + (d === '\x1b[A' ? -1 : 1)));
          term.write('\b \b'.repeat(line.length));
          line = hist[hi] || ''; term.write(line);
        }
        return;
      }
      for (const ch of d) {
        if (ch === '\r') {
          term.write('\r\n');
          const cmd = line.trim(); line = '';
          if (!cmd) { prompt(); continue; }
          if (cmd === 'clear') { term.clear(); prompt(); continue; }
          hist.push(cmd); hi = hist.length;
          busy = true;
          ws.send(JSON.stringify({ type: 'exec', cmd }));
        } else if (ch === '\x7f' || ch === '\b') {
          if (line) { line = line.slice(0, -1); term.write('\b \b'); }
        } else if (ch === '\x03') { line = ''; term.write('^C\r\n'); prompt(); }
        else if (ch === '\x0c') { term.clear(); }
        else if (ch >= ' ') { line += ch; term.write(ch); }
      }
    });
  }).catch((e) => { status.textContent = 'terminal failed: ' + e.message; });
  return { panel, machine: (st) => { machineState = st; want(); } };
}

function execPanel(ctx, id) {
  const cmd = h('input', { placeholder: 'ls -la', autocomplete: 'off', style: 'flex:1' });
  const out = h('pre.console', { 'aria-live': 'polite', 'aria-label': 'Exec output' });
  const runBtn = h('button.primary', { type: 'submit' }, 'Exec');
  let ctrl = null;
  ctx.cleanup(() => ctrl?.abort());
  const form = h('form.row', { onsubmit: async (e) => {
    e.preventDefault();
    if (!cmd.value.trim()) return;
    ctrl?.abort(); ctrl = new AbortController();
    clear(out, h('span.muted', '$ ' + cmd.value + '\n'));
    runBtn.disabled = true;
    try {
      await stream('POST', '/v1/computers/' + enc(id) + '/exec/stream', { cmd: cmd.value }, (f) => {
        if (f.type === 'stdout') out.append(f.data);
        else if (f.type === 'stderr') out.append(h('span.err', f.data));
        else if (f.type === 'exit') out.append(h('span.muted', `\n[exit ${f.result.exitCode}${f.result.timedOut ? ', timed out' : ''}]`));
        else if (f.type === 'error') out.append(h('span.err', json(f.error)));
        out.scrollTop = out.scrollHeight;
      }, ctrl.signal);
    } catch (er) { out.append(h('span.err', (er.code ? er.code + ': ' : '') + er.message)); }
    runBtn.disabled = false;
  } }, cmd, runBtn);
  return h('section.panel', h('h2', 'Exec'), form, out);
}

// filesPanel: the file browser. It lists only while the machine runs (machine(state), as the terminal: a
// machine not running refuses its files with E_COMPUTER_FAILED) and lists again once it runs.
// Returns { panel, machine(state) }.
function filesPanel(ctx, id, start) {
  let dir = start, running = false;
  const crumbs = h('div.crumbs');
  const body = h('div');
  const up = h('input', { type: 'file', multiple: true, id: 'upload-' + id, 'aria-label': 'Upload files' });
  const base = '/v1/computers/' + enc(id) + '/fs';
  const panel = h('section.panel', h('h2', 'Files'), crumbs, body,
    h('div.row', { style: 'margin-top:.5rem' }, h('label', { for: up.id, style: 'display:inline' }, 'Upload to this folder: '), up,
      h('button', { type: 'button', onclick: () => dl(dir, true) }, 'Download folder (.tar.gz)')));
  async function dl(path, isDir) {
    try {
      const blob = await api('GET', (isDir ? base + '/download' : base + '/read') + '?path=' + enc(path), undefined, { blob: true });
      download(blob, (path.split('/').pop() || 'root') + (isDir ? '.tar.gz' : ''));
    } catch (e) { fail(e); }
  }
  const turn = latest();
  async function load(p) {
    const mine = turn();
    const { entries } = await get(base + '?path=' + enc(p));
    if (!mine()) return;
    dir = p;
    const parts = p.split('/').filter(Boolean);
    clear(crumbs, h('a', { href: '#', onclick: (e) => { e.preventDefault(); load('/').catch(fail); } }, '/'),
      parts.map((s, i) => [h('a', { href: '#', onclick: (e) => { e.preventDefault(); load('/' + parts.slice(0, i + 1).join('/')).catch(fail); } }, s), '/']));
    entries.sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name));
    clear(body, table([
      ['Name', (e) => e.type === 'dir' ? h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); load(e.path).catch(fail); } }, e.name + '/') :
        h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); dl(e.path, false); } }, e.name)],
      ['Size', (e) => e.type === 'dir' ? '' : String(e.size), 'num'],
      ['Modified', (e) => time(e.modifiedAt), 'hide-narrow'],
      ['', (e) => h('button.danger', { type: 'button', 'aria-label': 'Delete ' + e.name, onclick: async () => {
        if (!confirm('Delete ' + e.path + '?')) return;
        try { await api('DELETE', base + '?path=' + enc(e.path) + '&recursive=true'); load(dir).catch(fail); } catch (er) { fail(er); }
      } }, 'Delete')],
    ], entries, { label: 'Files', empty: 'Empty folder.' }));
  }
  up.addEventListener('change', async () => {
    for (const f of up.files) {
      try { await api('PUT', base + '/write?path=' + enc(dir.replace(/\/$/, '') + '/' + f.name), { raw: f, type: 'application/octet-stream' }); toast('Uploaded ' + f.name); } catch (e) { fail(e); }
    }
    up.value = '';
    load(dir).catch(fail);
  });
  ctx.on((ev) => { if (running && ev.type === 'uploaded' && ev.payload.computerId === id) load(dir).catch(() => {}); });
  const machine = (st) => {
    if (st === 'running') {
      if (!running) { running = true; load(dir).catch((e) => clear(body, errorBox(e))); }
      return;
    }
    running = false; turn(); // an answer on its way is stale
    clear(crumbs);
    clear(body, h('p.muted', `The machine is ${st === 'stopped' ? st : 'not running (' + st + ')'}: its files are listed once it runs.`));
  };
  return { panel, machine };
}
