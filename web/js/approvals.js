// approvals.js — tool calls waiting for a human: tool, arguments, prompt, agent and run, time left;
// approve or deny (optionally remembered) inline; the list follows approval events live.

import { get, post, enc } from './api.js';
import { h, clear, time, ago, json, fail, toast, latest } from './ui.js';

export async function render(root, ctx) {
  const body = h('div');
  root.append(h('h1', 'Approvals'), h('p.muted', 'Dangerous tool calls of agents in approvalMode ask wait here for 120 s, then are denied.'), body);
  const turn = latest();
  async function load() {
    const mine = turn();
    const { approvals } = await get('/v1/approvals');
    if (!ctx.alive() || !mine()) return;
    if (!approvals.length) { clear(body, h('div.panel', h('p.empty', 'Nothing is waiting for an answer.'))); return; }
    clear(body, approvals.map((a) => {
      const rem = h('input', { type: 'checkbox', id: 'rem-' + a.approvalId });
      const answer = async (approve) => {
        try {
          const r = await post('/v1/approvals/' + enc(a.approvalId), { approve, remember: rem.checked });
          toast(`${r.approved ? 'Approved' : 'Denied'} ${a.call.name}${r.remembered ? ' (remembered)' : ''}`);
          load().catch(() => {});
        } catch (e) { fail(e); load().catch(() => {}); }
      };
      return h('article.panel.approval', { 'data-approval': a.approvalId, 'aria-label': 'Approval for ' + a.call.name },
        h('div.row', h('h2', h('code', a.call.name)), h('span.muted.small', 'agent ', h('a', { href: '/agents/' + enc(a.agent) }, a.agent), ' · run ',
          h('a', { href: '/runs/' + enc(a.runId) }, a.runId)), h('span.spacer'), h('span.small', 'expires ', time(a.expiresAt))),
        a.request.prompt ? h('p', a.request.prompt) : null,
        h('pre', json(a.call.args || a.request.args || {})),
        h('div.row', h('button.primary', { type: 'button', onclick: () => answer(true) }, 'Approve'),
          h('button.danger', { type: 'button', onclick: () => answer(false) }, 'Deny'),
          rem, h('label', { for: rem.id, style: 'display:inline' }, 'remember for this agent')));
    }));
  }
  await load();
  ctx.on((ev) => { if (ev.type === 'approval_required' || ev.type === 'approval_answered' || ev.type === 'run_finished') load().catch(() => {}); });
  ctx.onReconnect(() => load().catch(() => {}));
  const tick = setInterval(() => body.querySelectorAll('time').forEach((t) => { t.textContent = ago(t.getAttribute('datetime')); }), 15000);
  return () => clearInterval(tick);
}
