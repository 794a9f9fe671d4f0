// models.js — model providers (available or not, with reason and hint), the catalog with prices per
// million tokens (filterable), and a chat playground that streams POST /v1/models/chat/stream.

import { get, stream } from './api.js';
import { h, clear, badge, table, cost, num, field, errorBox, latest } from './ui.js';

const price = (m) => m.free ? 'free' : m.pricing ? `$${m.pricing.inputPerMTok} / $${m.pricing.outputPerMTok}` : '—';

export async function render(root, ctx) {
  const provBody = h('div'), catBody = h('div');
  const filter = h('input', { type: 'search', placeholder: 'filter models', 'aria-label': 'Filter models' });
  root.append(h('h1', 'Models'));
  const grid = h('div.grid');
  root.append(grid);
  const playground = h('section.panel');
  grid.append(h('section.panel', h('h2', 'Providers'), provBody), playground);
  root.append(h('section.panel', h('div.row', h('h2', 'Catalog'), h('span.spacer'), filter), catBody));
  let data = { models: [], providers: [] };
  const up = () => new Set(data.providers.filter((p) => p.available).map((p) => p.id));
  function drawCatalog() {
    const f = filter.value.toLowerCase();
    const live = up();
    clear(catBody, table([
      ['Model', (m) => h('span', h('code', m.id), m.displayName && m.displayName !== m.name ? h('span.muted.small', ' ' + m.displayName) : null)],
      ['Provider', (m) => h('span', m.provider, ' ', live.has(m.provider) ? badge('up', 'ok') : badge('down', 'bad'))],
      ['Context', (m) => m.contextWindow ? num(m.contextWindow) : '—', 'num hide-narrow'],
      ['In / out per MTok', price, 'num'],
      ['Tools', (m) => m.supportsTools ? 'yes' : 'no', 'hide-narrow'],
      ['Vision', (m) => m.supportsVision ? 'yes' : 'no', 'hide-narrow'],
    ], data.models.filter((m) => !f || m.id.toLowerCase().includes(f) || (m.displayName || '').toLowerCase().includes(f)), { label: 'Model catalog' }));
  }
  const turn = latest();
  async function load() {
    const mine = turn();
    const got = await get('/v1/models');
    if (!ctx.alive() || !mine()) return;
    data = got;
    clear(provBody, table([
      ['Provider', (p) => h('strong', p.displayName || p.id)],
      ['State', (p) => badge(p.available ? 'up' : 'down', p.available ? 'ok' : 'bad')],
      ['Reason', (p) => p.available ? '' : h('span.small', p.reason || '', p.hint ? h('div.muted', 'Hint: ' + p.hint) : null)],
    ], data.providers, { label: 'Model providers' }));
    drawCatalog();
    drawModelChoices();
  }
  filter.addEventListener('input', drawCatalog);

  // The playground.
  const modelSel = h('select');
  const system = h('textarea', { rows: 2, placeholder: 'optional system prompt' });
  const msg = h('textarea', { rows: 2, placeholder: 'Say something (Ctrl+Enter sends)' });
  const send = h('button.primary', { type: 'submit' }, 'Send');
  const reset = h('button', { type: 'button' }, 'New chat');
  const log = h('div.chat', { 'aria-live': 'polite', 'aria-label': 'Conversation' });
  const meta = h('p.small.muted');
  function drawModelChoices() {
    const keep = modelSel.value;
    const live = up();
    clear(modelSel, h('option', { value: 'auto' }, 'auto (router picks)'),
      data.models.filter((m) => live.has(m.provider)).map((m) => h('option', { value: m.id }, m.id)));
    if (keep) modelSel.value = keep;
  }
  let convo = [], ctrl = null;
  ctx.cleanup(() => ctrl?.abort());
  async function chat() {
    const text = msg.value.trim();
    if (!text) return;
    msg.value = '';
    convo.push({ role: 'user', content: text });
    log.append(h('div.bubble.user', text));
    const bubble = h('div.bubble', '…');
    log.append(bubble);
    send.disabled = true;
    ctrl = new AbortController();
    let got = '';
    const body = { model: modelSel.value || 'auto', messages: convo };
    if (system.value.trim()) body.system = system.value.trim();
    try {
      await stream('POST', '/v1/models/chat/stream', body, (ev) => {
        if (ev.type === 'text_delta') { got += ev.text; bubble.textContent = got; log.scrollTop = log.scrollHeight; }
        else if (ev.type === 'start') meta.textContent = 'model ' + ev.model;
        else if (ev.type === 'warning') log.append(h('div.small.warn', ev.message));
        else if (ev.type === 'error') bubble.replaceWith(errorBox(ev.error || {}));
        else if (ev.type === 'done' && ev.response) {
          const r = ev.response;
          if (!got) bubble.textContent = r.text || '(no text)';
          meta.textContent = `${r.model} · ${num(r.usage.inputTokens)} in · ${num(r.usage.outputTokens)} out · ${cost(r.usage.costUsd)} · ${r.latencyMs} ms`;
        }
      }, ctrl.signal);
      convo.push({ role: 'assistant', content: got || bubble.textContent });
    } catch (e) { bubble.replaceWith(errorBox(e)); convo.pop(); }
    send.disabled = false;
    msg.focus();
  }
  msg.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); chat(); } });
  reset.addEventListener('click', () => { convo = []; clear(log); meta.textContent = ''; });
  playground.append(h('h2', 'Chat playground'), field('Model', modelSel), field('System', system), log,
    h('form', { onsubmit: (e) => { e.preventDefault(); chat(); } }, field('Message', msg), h('div.row', send, reset)), meta);

  await load();
  ctx.on((ev) => { if (ev.topic === 'providers' && ev.type === 'provider_changed') load().catch(() => {}); });
  ctx.onReconnect(() => load().catch(() => {}));
}
