// agents.js — the agents list and one agent's page: a YAML editor validated live through
// POST /v1/agents/validate (each issue, then each warning, shown at its line), save (create or update), delete, and a run
// panel that starts a detached run (POST /v1/agents/:name/run?detach=true) and follows its events
// (GET /v1/runs/:id/events) into a timeline: leaving the page stops following, never the run, which goes
// on and is followed from Runs. A small Tests panel shows the agent's last test report
// (GET /v1/agents/:name/test) and runs its examples as tests (POST …/test, streamed; docs/runs.md).
// /agents/~new opens an empty editor (or the YAML handed over in history.state, e.g. by Sessions).

import { get, post, api, stream, enc } from './api.js';
import { h, clear, time, table, fail, toast, errorBox, debounce, field, badge, latest } from './ui.js';
import { lineOf } from './yamlpath.js';
import { Timeline } from './timeline.js';

const TEMPLATE = `name: my-agent
description: What this agent does
model: auto
persona: |
  You are a careful assistant.
tools: [computer, files]
limits:
  maxSteps: 12
  maxCostUsd: 0.1
`;

export function render(root, ctx, name) {
  return ctx.mode === 'edit' ? edit(root, ctx, name) : list(root, ctx);
}

async function list(root, ctx) {
  const body = h('div');
  root.append(h('div.row', h('h1', 'Agents'), h('span.spacer'), h('a.button.primary', { href: '/agents/~new' }, 'New agent')),
    h('div.panel', body));
  const turn = latest();
  async function load() {
    const mine = turn();
    const { agents } = await get('/v1/agents');
    if (!ctx.alive() || !mine()) return;
    clear(body, table([
      ['Name', (a) => h('a', { href: '/agents/' + enc(a.name) }, h('strong', a.name)), ],
      ['Description', (a) => h('span.small', a.description || a.displayName || ''), 'hide-narrow'],
      ['Model', (a) => h('code', a.model || 'auto')],
      ['Tools', (a) => h('span.small', (a.tools || []).join(', ')), 'hide-narrow'],
      ['Triggers', (a) => h('span.small', (a.triggers || []).map((t) => t.type).join(', ')), 'hide-narrow'],
      ['Runs', (a) => h('a', { href: '/runs?agent=' + enc(a.name) }, String(a.runCount)), 'num'],
      ['Updated', (a) => time(a.updatedAt)],
    ], agents, { onRow: (a) => ctx.go('/agents/' + enc(a.name)), label: 'Agents', empty: 'No agents yet: create one, or distill one from a session.' }));
  }
  await load();
  ctx.on((ev) => { if (ev.topic === 'triggers' || ev.type === 'run_finished') load().catch(() => {}); });
  ctx.onReconnect(() => load().catch(() => {}));
}

async function edit(root, ctx, name) {
  const isNew = name === '~new';
  let current = isNew ? '' : name;
  const ta = h('textarea.code', { spellcheck: 'false', autocapitalize: 'off', autocomplete: 'off', 'aria-label': 'Agent spec (YAML)', 'aria-describedby': 'spec-issues' });
  const gutter = h('pre.gutter', { 'aria-hidden': 'true' });
  const issuesEl = h('ul.plain.issues#spec-issues', { 'aria-live': 'polite' });
  const state = h('span.small');
  const saveBtn = h('button.primary', { type: 'button' }, isNew ? 'Create' : 'Save');
  const delBtn = isNew ? null : h('button.danger', { type: 'button' }, 'Delete');
  root.append(h('div.row', h('a', { href: '/agents' }, '← Agents')),
    h('h1', isNew ? 'New agent' : h('span', 'Agent ', h('code', name))));
  const grid = h('div.grid');
  const editorPanel = h('section.panel', h('div.row', h('h2', 'Spec'), h('span.spacer'), state),
    h('div.editor', gutter, ta), h('h3', 'Validation'), issuesEl, h('div.row.end', { style: 'margin-top:.6rem' }, delBtn, saveBtn));
  grid.append(editorPanel);
  root.append(grid);

  if (isNew) ta.value = (history.state && history.state.yaml) || TEMPLATE;
  else {
    try { ta.value = (await get('/v1/agents/' + enc(name))).yaml; } catch (e) { root.append(errorBox(e)); return; }
  }

  let bad = new Map();
  function drawGutter() {
    const n = ta.value.split('\n').length;
    const out = [];
    for (let i = 1; i <= n; i++) out.push(bad.has(i) ? h('span.bad', { title: bad.get(i).join('\n') }, String(i)) : String(i), '\n');
    clear(gutter, out);
    gutter.scrollTop = ta.scrollTop;
  }
  function goLine(line) {
    const lines = ta.value.split('\n');
    let pos = 0;
    for (let i = 0; i < line - 1; i++) pos += lines[i].length + 1;
    ta.focus();
    ta.setSelectionRange(pos, pos + (lines[line - 1] || '').length);
    ta.scrollTop = Math.max(0, (line - 4) * parseFloat(getComputedStyle(ta).lineHeight));
  }
  let vseq = 0;
  async function validate() {
    const my = ++vseq;
    state.textContent = 'checking…'; state.className = 'small muted';
    try {
      const res = await post('/v1/agents/validate', { yaml: ta.value });
      if (my !== vseq) return;
      bad = new Map();
      const items = (res.issues || []).map((s) => {
        const i = s.indexOf(': ');
        const path = i > 0 ? s.slice(0, i) : '';
        const line = lineOf(ta.value, path || s);
        if (!bad.has(line)) bad.set(line, []);
        bad.get(line).push(s);
        return { line, s };
      }).sort((a, b) => a.line - b.line);
      // Warnings (an unknown tool, a model no provider serves) follow the issues; they never make a spec invalid.
      const warnings = (res.warnings || []).map((s) => {
        const i = s.indexOf(': ');
        const line = lineOf(ta.value, i > 0 ? s.slice(0, i) : s);
        return h('li', { tabindex: 0, role: 'button', onclick: () => goLine(line), onkeydown: (e) => { if (e.key === 'Enter') goLine(line); } },
          h('span.badge.warn', 'warning, line ' + line), ' ', h('code', s));
      });
      clear(issuesEl, items.length ? items.map(({ line, s }) => h('li', { tabindex: 0, role: 'button', onclick: () => goLine(line),
        onkeydown: (e) => { if (e.key === 'Enter') goLine(line); } }, h('span.badge.bad', 'line ' + line), ' ', h('code', s))) : h('li.ok', 'Valid spec.'), warnings);
      state.textContent = res.ok ? 'valid' : `${items.length} issue${items.length === 1 ? '' : 's'}`;
      state.className = 'small ' + (res.ok ? 'ok' : 'error');
      drawGutter();
    } catch (e) {
      if (my === vseq) { state.textContent = e.message; state.className = 'small error'; }
    }
  }
  const later = debounce(validate, 300);
  ta.addEventListener('input', () => { drawGutter(); later(); });
  ta.addEventListener('scroll', () => { gutter.scrollTop = ta.scrollTop; });
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Tab' && !e.shiftKey && !e.ctrlKey && !e.metaKey && ta.selectionStart === ta.selectionEnd) {
      // two spaces, unless the user wants to leave the editor (Escape, then Tab)
      if (ta.dataset.escaped) { delete ta.dataset.escaped; return; }
      e.preventDefault(); ta.setRangeText('  ', ta.selectionStart, ta.selectionEnd, 'end'); drawGutter(); later();
    } else if (e.key === 'Escape') ta.dataset.escaped = '1';
    else if ((e.ctrlKey || e.metaKey) && e.key === 's') { e.preventDefault(); saveBtn.click(); }
  });
  drawGutter();
  await validate();

  saveBtn.addEventListener('click', async () => {
    try {
      const sum = current ? await api('PUT', '/v1/agents/' + enc(current), { yaml: ta.value }) : await post('/v1/agents', { yaml: ta.value });
      toast(`Saved ${sum.name}`);
      if (!current || sum.name !== current) { history.replaceState(null, '', '/agents/' + enc(sum.name)); current = sum.name; ctx.go('/agents/' + enc(sum.name)); }
    } catch (e) { fail(e); }
  });
  delBtn?.addEventListener('click', async () => {
    if (!confirm(`Delete agent ${current}? Its runs stay recorded.`)) return;
    try { await api('DELETE', '/v1/agents/' + enc(current)); toast('Deleted ' + current); ctx.go('/agents'); } catch (e) { fail(e); }
  });

  if (isNew) return;
  // Run and watch.
  const input = h('textarea', { rows: 3, placeholder: 'What should the agent do?' });
  const runBtn = h('button.primary', { type: 'submit' }, 'Run');
  const stopBtn = h('button.danger', { type: 'button', hidden: true }, 'Stop');
  const out = h('div');
  const runPanel = h('section.panel', h('h2', 'Run'),
    h('form', { onsubmit: (e) => { e.preventDefault(); run(); } }, field('Input', input), h('div.row', runBtn, stopBtn,
      h('span.small.muted', 'The run goes on if you leave this page; follow it from Runs.'))), out);
  grid.append(runPanel);
  let ctrl = null;
  ctx.cleanup(() => ctrl?.abort());
  tests(grid, ctx, current);
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); } });
  async function run() {
    if (!input.value.trim()) { input.focus(); return; }
    ctrl?.abort();
    ctrl = new AbortController();
    const my = ctrl;
    const tl = new Timeline();
    const head = h('p.small.muted', 'starting…');
    clear(out, head, tl.el);
    runBtn.disabled = true; stopBtn.hidden = false;
    let runId = '';
    stopBtn.onclick = async () => { if (runId) { try { await post('/v1/runs/' + enc(runId) + '/cancel'); } catch (e) { fail(e); } } };
    try {
      // Detached: the run belongs to the server, not to this page (a closed stream would abort it).
      const started = await post('/v1/agents/' + enc(current) + '/run?detach=true', { input: input.value }, { signal: my.signal });
      runId = started.runId;
      clear(head, 'Run ', h('a', { href: '/runs/' + enc(runId) }, runId), ' ', badge('running'));
      await stream('GET', '/v1/runs/' + enc(runId) + '/events', undefined, (ev) => {
        if (ev.type === 'run_end') clear(head, 'Run ', h('a', { href: '/runs/' + enc(runId) }, runId), ' ', badge(ev.result.stopReason || 'complete'));
        tl.add(ev);
      }, my.signal);
    } catch (e) { if (!my.signal.aborted) out.append(errorBox(e)); }
    runBtn.disabled = false; stopBtn.hidden = true;
  }
}

// tests is the agent's Tests panel: its last report, and a button that runs its examples as test cases.
function tests(grid, ctx, name) {
  const summary = h('p.small.muted', 'No test run yet. `agentd test ' + name + '` runs its examples and NAME.test.yaml.');
  const list = h('ul.plain');
  const btn = h('button', { type: 'button' }, 'Test examples');
  grid.append(h('section.panel', h('div.row', h('h2', 'Tests'), h('span.spacer'), btn), summary, list));
  const ctrl = new AbortController();
  ctx.cleanup(() => ctrl.abort());
  const line = (c) => h('li', badge(c.ok ? 'complete' : 'error'), ' ', h('strong', c.name), ' ',
    c.runId ? h('a.small', { href: '/runs/' + enc(c.runId) }, c.runId) : '',
    c.ok ? '' : h('div.small', (c.reasons || []).join('; ')));
  function show(rep) {
    if (!rep) return;
    clear(summary, `${rep.passed} passed, ${rep.failed} failed · `, time(rep.finishedAt));
    clear(list, ...rep.cases.map(line));
  }
  get('/v1/agents/' + enc(name) + '/test').then((r) => { if (ctx.alive()) show(r.report); }).catch(() => {});
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    clear(list);
    clear(summary, 'running…');
    try {
      await stream('POST', '/v1/agents/' + enc(name) + '/test', {}, (ev) => {
        if (ev.type === 'case') list.append(line(ev.case));
        if (ev.type === 'test_end') clear(summary, `${ev.passed} passed, ${ev.failed} failed`);
      }, ctrl.signal);
    } catch (e) { if (!ctrl.signal.aborted) { clear(summary); fail(e); } }
    btn.disabled = false;
  });
}
