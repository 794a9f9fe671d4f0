// runs.js — the runs list (status, agent, model, steps, cost, duration; filter by agent and status, kept in
// the URL; pages by cursor; new and finished runs arrive live) and one run's page (summary, cancel, the
// timeline of its events, followed live over GET /v1/runs/:id/events while it runs).

import { get, post, stream, enc } from './api.js';
import { h, clear, badge, time, table, tableRow, cost, dur, num, fail, toast, errorBox } from './ui.js';
import { Timeline } from './timeline.js';

const STATUSES = ['running', 'complete', 'step_limit', 'budget', 'timeout', 'aborted', 'loop', 'error'];

const columns = [
  ['Status', (r) => badge(r.status)],
  ['Run', (r) => h('a.runid', { href: '/runs/' + enc(r.runId), title: r.runId }, r.runId)],
  ['Agent', (r) => h('a', { href: '/agents/' + enc(r.agent) }, r.agent)],
  ['Model', (r) => h('span.small', r.model), 'hide-narrow'],
  ['Steps', (r) => String(r.steps), 'num'],
  ['Cost', (r) => cost(r.costUsd), 'num'],
  ['Duration', (r) => r.durationMs !== undefined ? dur(r.durationMs) : '…', 'num hide-narrow'],
  ['Started', (r) => time(r.startedAt)],
  ['Preview', (r) => h('span.small.muted', (r.error ? r.error.code + ' ' : '') + (r.preview || '').slice(0, 80)), 'hide-narrow'],
];

export function render(root, ctx, id) {
  return ctx.mode === 'detail' ? detail(root, ctx, id) : list(root, ctx);
}

async function list(root, ctx) {
  const q = new URLSearchParams(location.search);
  const agentSel = h('select', { 'aria-label': 'Agent' }, h('option', { value: '' }, 'all agents'));
  const statusSel = h('select', { 'aria-label': 'Status' }, h('option', { value: '' }, 'any status'), STATUSES.map((s) => h('option', { value: s }, s)));
  statusSel.value = q.get('status') || '';
  const count = h('span.muted.small');
  const body = h('div');
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  root.append(h('div.row', h('h1', 'Runs'), h('span.spacer'), count),
    h('div.panel', h('div.fields', h('div.field', h('label', 'Agent'), agentSel), h('div.field', h('label', 'Status'), statusSel)), body, h('div.row', more)));

  get('/v1/agents').then(({ agents }) => {
    for (const a of agents) agentSel.append(h('option', { value: a.name }, a.name));
    agentSel.value = q.get('agent') || '';
  }).catch(() => {});
  agentSel.value = q.get('agent') || '';

  let rows = [], cursor = '', tbody = null;
  let epoch = 0; // bumped by a reset (the agent filter): answers to an older one are dropped
  let evs = 0; const lastEv = new Map(); // live events counted, and the count at each run's last one
  const visible = (r) => (!statusSel.value || r.status === statusSel.value) && (!agentSel.value || r.agent === agentSel.value);

  function draw() {
    const shown = rows.filter(visible);
    count.textContent = `${shown.length} shown${cursor ? ' (more to load)' : ''}`;
    const t = table(columns, shown, { onRow: (r) => ctx.go('/runs/' + enc(r.runId)), key: (r) => r.runId, label: 'Runs', empty: 'No runs match.' });
    clear(body, t);
    tbody = t.querySelector('tbody');
    more.hidden = !cursor;
  }
  const query = (more) => {
    const p = new URLSearchParams({ limit: '200' });
    if (agentSel.value) p.set('agent', agentSel.value);
    if (more && cursor) p.set('cursor', cursor);
    return '/v1/runs?' + p;
  };
  async function page(reset) {
    const mine = reset ? ++epoch : epoch;
    const res = await get(query(!reset));
    if (mine !== epoch) return;
    rows = reset ? res.runs : rows.concat(res.runs);
    cursor = res.nextCursor || '';
    draw();
  }
  // refresh (the event socket (re)opened): the first page again, merged over the rows shown so that the
  // pages loaded stay; a run a live event drew while the page was fetched keeps that newer row. A page
  // that does not meet the rows shown (more new runs than a page) replaces them.
  async function refresh() {
    const mine = epoch, at = evs;
    const res = await get(query(false));
    if (mine !== epoch) return;
    const now = new Map(rows.map((r) => [r.runId, r]));
    const fresh = res.runs.map((r) => (lastEv.get(r.runId) || 0) > at ? now.get(r.runId) || r : r);
    const inPage = new Set(fresh.map((r) => r.runId));
    const first = rows.findIndex((r) => inPage.has(r.runId));
    const out = (r) => !inPage.has(r.runId);
    if (first < 0) { rows = fresh; cursor = res.nextCursor || ''; } else rows = rows.slice(0, first).filter(out).concat(fresh, rows.slice(first).filter(out));
    draw();
  }
  function filters() {
    const p = new URLSearchParams();
    if (agentSel.value) p.set('agent', agentSel.value);
    if (statusSel.value) p.set('status', statusSel.value);
    history.replaceState(null, '', '/runs' + (p.toString() ? '?' + p : ''));
  }
  agentSel.addEventListener('change', () => { filters(); page(true).catch(fail); });
  statusSel.addEventListener('change', () => { filters(); draw(); });
  more.addEventListener('click', () => page(false).catch(fail));
  await page(true);

  // Live: a started run goes on top, a finished one replaces its row.
  ctx.on((ev) => {
    if (ev.topic !== 'runs' || (ev.type !== 'run_started' && ev.type !== 'run_finished')) return;
    const r = ev.payload;
    lastEv.set(r.runId, ++evs);
    const i = rows.findIndex((x) => x.runId === r.runId);
    if (i >= 0) rows[i] = r; else rows.unshift(r);
    if (!tbody) { draw(); return; }
    const old = tbody.querySelector(`tr[data-key="${CSS.escape(r.runId)}"]`);
    if (!visible(r)) { old?.remove(); return; }
    const tr = tableRow(columns, r, { onRow: (x) => ctx.go('/runs/' + enc(x.runId)), key: (x) => x.runId });
    if (old) old.replaceWith(tr); else tbody.prepend(tr);
  });
  ctx.onReconnect(() => refresh().catch(() => {}));
}

async function detail(root, ctx, id) {
  const ctrl = new AbortController();
  ctx.cleanup(() => ctrl.abort());
  const head = h('div.panel');
  const tl = new Timeline(() => {});
  root.append(h('div.row', h('a', { href: '/runs' }, '← Runs')), h('h1', 'Run ', h('code', id)), head,
    h('section.panel', h('h2', 'Timeline'), tl.el));
  let data;
  try { data = await get('/v1/runs/' + enc(id)); } catch (e) { clear(head, errorBox(e)); return; }
  const summary = (r, running) => {
    const u = r.usage || { inputTokens: r.inputTokens, outputTokens: r.outputTokens, costUsd: r.costUsd };
    const status = running ? 'running' : (r.status || r.stopReason || 'complete');
    const cancel = h('button.danger', { type: 'button', onclick: async () => {
      try { const a = await post('/v1/runs/' + enc(id) + '/cancel'); toast(a && a.cancelled === false ? 'The run had already finished' : 'Cancel requested'); } catch (e) { fail(e); }
    } }, 'Cancel run');
    clear(head, h('dl.kv',
      h('dt', 'Status'), h('dd', badge(status), r.error ? h('span.error', ` ${r.error.code}: ${r.error.message}`) : null),
      h('dt', 'Agent'), h('dd', h('a', { href: '/agents/' + enc(r.agent) }, r.agent)),
      h('dt', 'Model'), h('dd', r.model || ''),
      h('dt', 'Steps'), h('dd', String(r.steps || 0)),
      h('dt', 'Tokens'), h('dd', `${num(u.inputTokens)} in · ${num(u.outputTokens)} out`),
      h('dt', 'Cost'), h('dd', cost(u.costUsd)),
      h('dt', 'Duration'), h('dd', dur(r.durationMs) || '…'),
      r.startedAt ? [h('dt', 'Started'), h('dd', time(r.startedAt))] : null),
      running ? h('div.row', { style: 'margin-top:.6rem' }, cancel) : null);
  };
  const running = data.result.status === 'running';
  summary(data.result, running);
  let last = 0;
  for (const e of data.events) { tl.add(e); last++; }
  if (!running) return;
  // Follow the run live; the stored events above are skipped by position.
  let n = 0;
  stream('GET', '/v1/runs/' + enc(id) + '/events', undefined, (ev) => {
    if (++n <= last) return;
    tl.add(ev);
    if (ev.type === 'usage') summary({ ...data.result, inputTokens: ev.cumulative?.inputTokens, outputTokens: ev.cumulative?.outputTokens, costUsd: ev.cumulative?.costUsd }, true);
    if (ev.type === 'run_end') summary({ ...ev.result, startedAt: data.result.startedAt }, false);
  }, ctrl.signal).catch((e) => { if (!ctrl.signal.aborted) root.append(errorBox(e)); });
}
