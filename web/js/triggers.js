// triggers.js — mounted triggers (http, webhook: path, signed or not) and cron jobs with their next
// firing; follows the triggers topic (agents saved or deleted, cron fired or skipped).

import { get, enc } from './api.js';
import { h, clear, time, table, badge, latest } from './ui.js';

export async function render(root, ctx) {
  const mounted = h('div'), cron = h('div'), fired = h('ul.plain');
  root.append(h('h1', 'Triggers'),
    h('section.panel', h('h2', 'Mounted'), mounted),
    h('section.panel', h('h2', 'Cron'), cron),
    h('section.panel', h('h2', 'Recent trigger events'), fired));
  const turn = latest();
  async function load() {
    const mine = turn();
    const t = await get('/v1/triggers');
    if (!ctx.alive() || !mine()) return;
    clear(mounted, table([
      ['Agent', (x) => h('a', { href: '/agents/' + enc(x.agent) }, x.agent)],
      ['Type', (x) => h('code', x.type)],
      ['Mounted at', (x) => h('code', x.at)],
      ['Signed', (x) => x.type !== 'webhook' ? h('span.muted.small', 'n/a') : /UNSIGNED/.test(x.detail || '') ? badge('unsigned', 'bad') : badge('signed', 'ok')],
      ['Detail', (x) => h('span.small', x.detail || ''), 'hide-narrow'],
    ], t.triggers || [], { label: 'Mounted triggers', empty: 'No http or webhook triggers. Add one to an agent spec (triggers: [{type: http}]).' }));
    clear(cron, table([
      ['Agent', (x) => h('a', { href: '/agents/' + enc(x.agent) }, x.agent)],
      ['Schedule', (x) => h('code', x.schedule)],
      ['Next firing', (x) => h('span', time(x.nextAt), h('span.muted.small', ' ' + new Date(x.nextAt).toLocaleString()))],
      ['Prompt', (x) => h('span.small', x.prompt || ''), 'hide-narrow'],
    ], t.cron || [], { label: 'Cron jobs', empty: 'No cron triggers.' }));
  }
  await load();
  ctx.on((ev) => {
    if (ev.topic !== 'triggers') return;
    const p = ev.payload || {};
    fired.prepend(h('li', time(ev.at), ' ', h('code', ev.type), ' ', p.agent || p.name || '', p.runId ? [' → ', h('a', { href: '/runs/' + enc(p.runId) }, p.runId)] : null));
    load().catch(() => {});
  });
  ctx.onReconnect(() => load().catch(() => {}));
  if (!fired.children.length) fired.append(h('li.muted', 'Live: cron firings and trigger changes appear here.'));
}
