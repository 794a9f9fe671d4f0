// timeline.js — a run's events as a timeline, built incrementally (the same code renders a stored run
// and a live stream): steps, assistant text (deltas joined), tool calls with arguments and output,
// usage and cost, warnings, approvals with approve/deny inline, the end with stop reason and error; a
// browser_screenshot's saved PNG shown as an image, read from the run's computer (computer_ready names it)
// through the files API.

import { api, post, enc } from './api.js';
import { h, badge, cost, dur, json, num, fail, toast, dataURL } from './ui.js';

// screenshotPath: the /work PNG a browser_screenshot result says it saved ("saved a N-byte PNG screenshot at /work/x.png").
export const screenshotPath = (out) => (/ at (\/work\/[^\s"']+\.png)\s*$/.exec(out || '') || [])[1] || '';

export class Timeline {
  constructor(onChange) {
    this.el = h('ol.timeline', { 'aria-label': 'Run timeline' });
    this.tools = new Map();
    this.text = null;
    this.onChange = onChange || (() => {});
    this.totals = null;
  }

  item(cls, kind, ...body) {
    const li = h('li', { class: cls }, h('div.head', h('span.kind', kind), ...body));
    this.el.append(li);
    return li;
  }

  add(ev) {
    if (ev.type !== 'text_delta') this.text = null;
    switch (ev.type) {
      case 'run_start': this.item('start', 'Run started', h('span.muted.small', `${ev.agent} · ${ev.model}`)); break;
      case 'step_start': this.sawText = false; this.item('step', 'Step ' + ev.step); break;
      case 'text_delta':
        this.sawText = true;
        if (!this.text) { const li = this.item('text', 'Assistant'); this.text = h('pre.msg'); li.append(this.text); }
        this.text.textContent += ev.text;
        break;
      case 'message': {
        const m = ev.message || {};
        const t = typeof m.content === 'string' ? m.content : (m.content || []).filter((p) => p.type === 'text').map((p) => p.text).join('\n');
        if (t && (m.role !== 'assistant' || !this.sawText)) this.item('text', (m.role || 'message')[0].toUpperCase() + (m.role || 'message').slice(1)).append(h('pre', t));
        break;
      }
      case 'tool_start': {
        const c = ev.call || {};
        const li = this.item('tool', 'Tool call', h('code', c.name), h('span.muted.small', c.id));
        const out = h('pre.out', { hidden: true });
        li.append(h('details', { open: true }, h('summary.small', 'arguments'), h('pre', json(c.args || {}))), out);
        this.tools.set(c.id, { li, out });
        break;
      }
      case 'tool_delta': {
        const t = this.tools.get(ev.callId);
        if (t) { t.out.hidden = false; t.out.textContent += ev.text; }
        break;
      }
      case 'tool_end': {
        const c = ev.call || {};
        let t = this.tools.get(c.id);
        if (!t) { this.add({ type: 'tool_start', call: c }); t = this.tools.get(c.id); }
        t.out.hidden = false;
        t.out.textContent = ev.output || '';
        if (ev.isError) t.out.classList.add('error');
        else if (c.name === 'browser_screenshot' && this.computerId && screenshotPath(ev.output)) t.li.append(this.screenshot(this.computerId, screenshotPath(ev.output)));
        t.li.querySelector('.head').append(badge(ev.isError ? 'error' : 'ok'), h('span.muted.small', dur(ev.durationMs)));
        break;
      }
      case 'usage': {
        const u = ev.cumulative || ev.usage || {};
        this.totals = u;
        this.item('usage', 'Usage', h('span.small.muted', `${num(u.inputTokens)} in · ${num(u.outputTokens)} out · ${cost(u.costUsd)} so far`));
        break;
      }
      case 'approval_required': this.approval(ev); break;
      case 'approval_answered': case 'tool_denied': case 'tool_approved':
        this.item(ev.type === 'tool_denied' ? 'bad' : 'approval', ev.type.replace('_', ' '), h('span.small.muted', ev.reason || ev.approvalId || ''));
        this.resolveApproval(ev.approvalId);
        break;
      case 'warning': this.item('warning', 'Warning', h('span', typeof ev.message === 'string' ? ev.message : json(ev.message)), ev.code ? h('code', ev.code) : null); break;
      case 'run_end': {
        const r = ev.result || {};
        const li = this.item(r.error ? 'bad' : 'end', 'Run ended', badge(r.stopReason || 'complete'),
          h('span.small.muted', `${r.steps} steps · ${num(r.usage && r.usage.inputTokens)} in · ${num(r.usage && r.usage.outputTokens)} out · ${cost(r.usage && r.usage.costUsd)} · ${dur(r.durationMs)}`));
        if (r.error) li.append(h('p.error', `${r.error.code}: ${r.error.message}`));
        if (r.text) li.append(h('pre', r.text));
        for (const id of [...this.el.querySelectorAll('[data-approval]')].map((x) => x.dataset.approval)) this.resolveApproval(id);
        break;
      }
      case 'computer_ready':
        this.computerId = ev.computerId;
        this.item('other', 'computer ready', h('a.small', { href: '/computers/' + enc(ev.computerId) }, ev.computerId), ev.provider ? h('span.small.muted', ev.provider) : null);
        break;
      case 'error': this.item('bad', 'Error', h('span.error', (ev.error && (ev.error.code + ': ' + ev.error.message)) || json(ev))); break;
      default:
        this.item('other', ev.type.replace(/_/g, ' '), h('span.small.muted', ev.reason || ev.computerId || ev.message && String(ev.message) || ''));
    }
    this.onChange(ev);
  }

  // screenshot: the PNG at path in computer id, fetched with the token and shown inline; a machine that is
  // gone (or a file deleted since) says so instead.
  screenshot(id, path) {
    const fig = h('figure.screenshot', h('figcaption.small.muted', path));
    api('GET', '/v1/computers/' + enc(id) + '/fs/read?path=' + enc(path), undefined, { blob: true })
      .then(dataURL)
      .then((src) => fig.prepend(h('img.shot', { src, alt: 'Screenshot saved by the run at ' + path })))
      .catch((e) => fig.append(h('span.small.muted', ' (no longer readable: ' + (e.code ? e.code + ': ' : '') + e.message + ')')));
    return fig;
  }

  approval(ev) {
    const req = ev.request || {};
    const remember = h('input', { type: 'checkbox', id: 'rem-' + ev.approvalId });
    const answer = async (approve) => {
      try {
        await post('/v1/approvals/' + enc(ev.approvalId), { approve, remember: remember.checked });
        toast(approve ? 'Approved' : 'Denied');
        this.resolveApproval(ev.approvalId, approve ? 'approved' : 'denied');
      } catch (e) { fail(e); }
    };
    const box = h('div.row.approve-box',
      h('button.primary', { type: 'button', onclick: () => answer(true) }, 'Approve'),
      h('button.danger', { type: 'button', onclick: () => answer(false) }, 'Deny'),
      h('span', remember, h('label', { for: 'rem-' + ev.approvalId, style: 'display:inline' }, ' remember')));
    const li = this.item('approval', 'Approval needed', h('code', req.tool || ''), badge('pending'));
    li.dataset.approval = ev.approvalId;
    li.append(req.prompt ? h('p', req.prompt) : null, h('pre', json(req.args || {})), box);
  }

  resolveApproval(id, how) {
    const li = id && this.el.querySelector(`[data-approval="${CSS.escape(id)}"]`);
    if (!li) return;
    li.querySelector('.approve-box')?.remove();
    const b = li.querySelector('.badge');
    if (b) { b.textContent = how || 'answered'; b.className = 'badge ' + (how === 'denied' ? 'denied' : 'ok'); }
  }
}
