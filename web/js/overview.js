// overview.js — the front page: health and version, doctor warnings, computer and model providers (up or
// down, with reason and hint), live machines, active runs, pending approvals; refreshed by live events.

import { get } from './api.js';
import { h, clear, badge, time, table, cost, debounce, link, latest } from './ui.js';

export async function render(root, ctx) {
  root.append(h('h1', 'Overview'));
  const top = h('div.grid'), mid = h('div.grid');
  root.append(top, mid);

  const turn = latest();
  async function load(withDoctor) {
    const mine = turn();
    const [health, computers, runs, approvals, doctor] = await Promise.all([
      get('/health'), get('/v1/computers'), get('/v1/runs?limit=100'), get('/v1/approvals'),
      withDoctor || !load.doctor ? get('/v1/doctor') : load.doctor,
    ]);
    load.doctor = doctor;
    if (!ctx.alive() || !mine()) return;
    const active = runs.runs.filter((r) => r.status === 'running');
    const live = computers.computers.filter((c) => c.state === 'running' || c.state === 'creating');
    clear(top,
      h('section.panel', { 'aria-labelledby': 'ov-health' }, h('h2#ov-health', 'Server'),
        h('div.stats',
          h('div', h('div.stat', health.ok ? 'up' : 'down'), h('div.muted.small', 'version ' + health.version)),
          h('div', h('div.stat', String(live.length)), h('div.muted.small', 'live machines')),
          h('div', h('div.stat', String(active.length)), h('div.muted.small', 'active runs')),
          h('div', h('div.stat', { class: 'stat' + (approvals.approvals.length ? ' warn' : '') }, String(approvals.approvals.length)), h('div.muted.small', 'pending approvals'))),
        h('p.small.muted', `${doctor.platform} · ${doctor.node} · home ${doctor.agentHome} · up ${Math.round(health.uptimeSec / 60)} min`),
        h('p.small', 'Selection: computers on ', h('strong', doctor.selection.provider || 'none'), ' (', doctor.selection.providerReason, '); model ',
          h('strong', doctor.selection.model || 'none'), ' (', doctor.selection.modelReason, ').')),
      h('section.panel', { 'aria-labelledby': 'ov-warn' }, h('h2#ov-warn', 'Warnings'),
        doctor.warnings && doctor.warnings.length ? h('ul', doctor.warnings.map((w) => h('li.warn', w))) : h('p.empty', 'No warnings.')));
    const prov = (rows, kind) => table([
      ['Provider', (p) => h('span', h('strong', p.displayName || p.name || p.id), p.isolationKind ? h('span.muted.small', ' ' + p.isolationKind) : null)],
      ['State', (p) => badge(p.available ? 'up' : 'down', p.available ? 'ok' : 'bad')],
      ['Detail', (p) => p.available ? h('span.small.muted', p.version || (p.models || []).slice(0, 3).join(', ')) :
        h('span.small', p.reason || '', p.hint ? h('div.muted', 'Hint: ' + p.hint) : null)],
    ], rows, { label: kind });
    clear(mid,
      h('section.panel', h('h2', 'Computer providers'), prov(doctor.providers, 'Computer providers')),
      h('section.panel', h('h2', 'Model providers'), prov(doctor.models, 'Model providers')),
      h('section.panel', h('h2', 'Live machines'), table([
        ['Machine', (c) => link('/computers/' + encodeURIComponent(c.id), c.name || c.id)],
        ['State', (c) => badge(c.state, c.state + ' machine')], ['Provider', (c) => c.provider], ['Created', (c) => time(c.createdAt)],
      ], live, { empty: 'No machines running.' })),
      h('section.panel', h('h2', 'Active runs'), table([
        ['Run', (r) => link('/runs/' + encodeURIComponent(r.runId), r.runId)], ['Agent', (r) => r.agent],
        ['Steps', (r) => String(r.steps), 'num'], ['Cost', (r) => cost(r.costUsd), 'num'], ['Started', (r) => time(r.startedAt)],
      ], active, { empty: 'No run in flight.' })),
      h('section.panel', h('h2', 'Pending approvals'), table([
        ['Tool', (a) => h('code', a.call.name)], ['Agent', (a) => a.agent],
        ['Run', (a) => link('/runs/' + encodeURIComponent(a.runId), a.runId)], ['Expires', (a) => time(a.expiresAt)],
      ], approvals.approvals, { empty: 'Nothing waiting.' }), h('p', link('/approvals', 'Answer approvals →'))));
  }
  await load(true);
  const refresh = debounce((d) => load(d).catch(() => {}), 250);
  ctx.on((ev) => { if (ev.topic) refresh(ev.topic === 'providers' && ev.type === 'provider_changed'); });
  ctx.onReconnect(() => refresh(true));
}
