// app.js — the dashboard's entry: History API routing over the views (DESIGN §9 URLs; reload and back
// work), the shared event socket, the nav (active link, phone menu, pending-approval count).
// Each view module exports render(root, ctx, ...params) and may return a cleanup function; ctx.on(fn)
// subscribes to live events until the view is left (fn first gets the events that came since the view
// began loading: a view listens once its first answer is drawn, and what changed meanwhile is in them);
// ctx.onReconnect(fn) calls fn each time the event socket (re)opens (events.js), and at once if it
// opened while the view loaded, so fn reloads what the view fetched before its events could reach it;
// ctx.go(path) navigates.

import { EventSocket } from './events.js';
import { get } from './api.js';
import { h, clear, errorBox } from './ui.js';

const routes = [
  [/^\/$/, 'overview', () => import('./overview.js')],
  [/^\/agents$/, 'agents', () => import('./agents.js'), 'list'],
  [/^\/agents\/([^/]+)$/, 'agents', () => import('./agents.js'), 'edit'],
  [/^\/runs$/, 'runs', () => import('./runs.js'), 'list'],
  [/^\/runs\/([^/]+)$/, 'runs', () => import('./runs.js'), 'detail'],
  [/^\/computers$/, 'computers', () => import('./computers.js'), 'list'],
  [/^\/computers\/([^/]+)$/, 'computers', () => import('./computers.js'), 'detail'],
  [/^\/approvals$/, 'approvals', () => import('./approvals.js')],
  [/^\/models$/, 'models', () => import('./models.js')],
  [/^\/triggers$/, 'triggers', () => import('./triggers.js')],
  [/^\/sessions$/, 'sessions', () => import('./sessions.js')],
  [/^\/events$/, 'events', () => import('./eventlog.js')],
];

const main = document.getElementById('main');
const events = new EventSocket(document.getElementById('conn'));
let cleanup = [];
let seq = 0;

function go(path, state) {
  if (path !== location.pathname + location.search) history.pushState(state || null, '', path);
  render();
}

async function render() {
  const my = ++seq;
  for (const fn of cleanup.splice(0)) { try { fn(); } catch { /* leaving */ } }
  const path = location.pathname.replace(/\/+$/, '') || '/';
  const route = routes.find(([re]) => re.test(path));
  document.querySelectorAll('nav a').forEach((a) => {
    if (route && a.dataset.view === route[1]) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  });
  document.getElementById('nav').classList.remove('open');
  document.getElementById('menu').setAttribute('aria-expanded', 'false');
  const root = h('div.view');
  clear(main, root);
  if (!route) {
    root.append(h('h1', 'Not found'), h('p', 'No view at ', h('code', path), '. ', h('a', { href: '/' }, 'Go to the overview'), '.'));
    document.title = 'Not found · agentd';
    return;
  }
  const [re, name, load, mode] = route;
  const params = re.exec(path).slice(1).map(decodeURIComponent);
  const opens = events.opens; // before the view's first fetch
  const early = []; // the events since then, until the view is ready
  const stopEarly = events.on((ev) => early.push(ev));
  cleanup.push(stopEarly);
  const ctx = {
    go,
    on: (fn) => {
      const off = events.on(fn);
      cleanup.push(off);
      for (const ev of early) { try { fn(ev); } catch (e) { console.warn('event listener', e); } }
      return off;
    },
    onReconnect: (fn) => {
      const off = events.onReconnect(fn);
      cleanup.push(off);
      if (events.opens !== opens) fn(); // the socket opened during the view's load: events may have come before it listened
      return off;
    },
    cleanup: (fn) => cleanup.push(fn),
    alive: () => my === seq,
    events,
    mode,
  };
  document.title = name[0].toUpperCase() + name.slice(1) + ' · agentd';
  try {
    const mod = await load();
    if (my !== seq) return;
    const done = await mod.render(root, ctx, ...params);
    if (typeof done === 'function') cleanup.push(done);
    stopEarly(); early.length = 0;
    root.dataset.ready = 'true';
    performance.mark('view:' + name); // read by the browser test (time to first render)
  } catch (e) {
    if (my !== seq) return;
    stopEarly(); early.length = 0;
    root.append(errorBox(e));
    root.dataset.ready = 'true';
  }
}

// Same-origin links navigate inside the page; modified clicks, downloads and new tabs are left alone.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.target || a.hasAttribute('download')) return;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || u.pathname.startsWith('/v1/') || u.pathname === '/health') return;
  e.preventDefault();
  go(u.pathname + u.search);
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
});
window.addEventListener('popstate', render);

document.getElementById('menu').addEventListener('click', () => {
  const nav = document.getElementById('nav');
  const open = nav.classList.toggle('open');
  document.getElementById('menu').setAttribute('aria-expanded', String(open));
});

// The pending-approval count in the nav stays live on every view.
async function countApprovals() {
  try {
    const { approvals } = await get('/v1/approvals');
    const el = document.getElementById('approval-count');
    el.hidden = !approvals.length;
    el.textContent = approvals.length;
    el.setAttribute('aria-label', approvals.length + ' pending');
  } catch { /* shown by the views */ }
}
events.on((ev) => { if (ev.type === 'approval_required' || ev.type === 'approval_answered' || ev.type === 'run_finished') countApprovals(); });
events.onReconnect(countApprovals);

render();
// The socket opens once a first call has passed (it may have asked for the token).
countApprovals().finally(() => events.connect());
