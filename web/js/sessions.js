// sessions.js — conversation transcripts: discover them on this machine (by source, under a path),
// import one (by path or pasted content), list the stored ones, read one, and distill it into an agent
// spec with the progress of the distill stream, then open that spec in the agent editor.

import { get, post, stream, enc } from './api.js';
import { h, clear, time, table, field, fail, toast, errorBox, latest } from './ui.js';

const SOURCES = ['claude-code', 'codex', 'chatgpt', 'gemini', 'markdown', 'jsonl'];

export async function render(root, ctx) {
  const source = h('select', h('option', { value: '' }, 'any source'), SOURCES.map((s) => h('option', { value: s }, s)));
  const path = h('input', { placeholder: 'default: your home', autocomplete: 'off' });
  const found = h('div');
  const content = h('textarea', { rows: 4, placeholder: 'or paste a transcript (markdown, JSONL, an export…)' });
  const impPath = h('input', { placeholder: '/path/to/session.jsonl', autocomplete: 'off' });
  const impSource = h('select', h('option', { value: '' }, 'detect'), SOURCES.map((s) => h('option', { value: s }, s)));
  const stored = h('div');
  const view = h('div');
  const useModel = h('input', { type: 'checkbox', id: 'use-model' });
  root.append(h('h1', 'Sessions'));
  const grid = h('div.grid');
  root.append(grid, h('section.panel', h('h2', 'Stored transcripts'), h('div.row', useModel, h('label', { for: 'use-model', style: 'display:inline' }, 'distill with a model (costs tokens; otherwise a free heuristic)')), stored), view);
  grid.append(
    h('section.panel', h('h2', 'Discover'),
      h('form', { onsubmit: (e) => { e.preventDefault(); discover(); } },
        h('div.fields', field('Source', source), field('Under', path), h('div.field', h('button.primary', { type: 'submit' }, 'Discover')))), found),
    h('section.panel', h('h2', 'Import'),
      h('form', { onsubmit: (e) => { e.preventDefault(); imp({ path: impPath.value.trim() || undefined, content: content.value || undefined, source: impSource.value || undefined }); } },
        h('div.fields', field('Path', impPath), field('Source', impSource)), field('Content', content), h('button.primary', { type: 'submit' }, 'Import'))));

  async function discover() {
    clear(found, h('p.muted', 'Looking…'));
    try {
      const p = new URLSearchParams();
      if (source.value) p.set('source', source.value);
      if (path.value.trim()) p.set('path', path.value.trim());
      const { sessions } = await get('/v1/sessions/discover?' + p);
      clear(found, table([
        ['Title', (s) => h('span', s.title || s.id, h('div.small.muted', s.path))],
        ['Source', (s) => s.source], ['Messages', (s) => String(s.messageCount), 'num'], ['Updated', (s) => time(s.updatedAt), 'hide-narrow'],
        ['', (s) => h('button', { type: 'button', onclick: () => imp({ path: s.path, source: s.source }) }, 'Import')],
      ], sessions, { label: 'Discovered sessions', empty: 'No sessions found there.' }));
    } catch (e) { clear(found, errorBox(e)); }
  }
  async function imp(body) {
    if (!body.path && !body.content) { toast('Give a path or paste a transcript', true); return; }
    try {
      const { transcript } = await post('/v1/sessions/import', body);
      toast(`Imported ${transcript.title || transcript.id} (${transcript.messages.length} messages)`);
      content.value = ''; impPath.value = '';
      await load();
      show(transcript.id);
    } catch (e) { fail(e); }
  }
  const turn = latest();
  async function load() {
    const mine = turn();
    const { sessions } = await get('/v1/sessions');
    if (!ctx.alive() || !mine()) return;
    clear(stored, table([
      ['Title', (s) => h('a', { href: '#', onclick: (e) => { e.preventDefault(); show(s.id); } }, s.title || s.id)],
      ['Source', (s) => s.source], ['Messages', (s) => String(s.messageCount ?? (s.messages || []).length), 'num'],
      ['Imported', (s) => time(s.importedAt || s.createdAt || s.updatedAt), 'hide-narrow'],
      ['', (s) => h('button.primary', { type: 'button', onclick: () => distill(s.id) }, 'Distill')],
    ], sessions, { label: 'Stored transcripts', empty: 'No transcripts imported yet.' }));
  }
  async function show(id) {
    try {
      const t = await get('/v1/sessions/' + enc(id));
      const tr = t.transcript || t;
      clear(view, h('section.panel', h('div.row', h('h2', tr.title || tr.id), h('span.spacer'), h('button.primary', { type: 'button', onclick: () => distill(tr.id) }, 'Distill into an agent')),
        h('ol.timeline', (tr.messages || []).slice(0, 200).map((m) => h('li', { class: m.role === 'assistant' ? 'text' : m.role === 'tool' ? 'tool' : '' },
          h('div.head', h('span.kind', m.role), m.toolName ? h('code', m.toolName) : null), m.content ? h('pre', m.content.slice(0, 4000)) : null)))));
      view.scrollIntoView({ block: 'nearest' });
    } catch (e) { fail(e); }
  }
  async function distill(id) {
    const bar = h('div');
    const stage = h('p.small.muted', 'starting…');
    const out = h('div');
    clear(view, h('section.panel', h('h2', 'Distilling'), stage, h('div.progress', { role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100 }, bar), out));
    const progress = view.querySelector('.progress');
    try {
      await stream('POST', '/v1/sessions/distill/stream', { transcriptId: id, useModel: useModel.checked }, (f) => {
        if (f.type === 'progress') {
          stage.textContent = f.stage; bar.style.width = Math.round(f.pct * 100) + '%'; progress.setAttribute('aria-valuenow', Math.round(f.pct * 100));
        } else if (f.type === 'done') {
          stage.textContent = 'done'; bar.style.width = '100%';
          const notes = (f.distilled && f.distilled.notes) || [];
          clear(out, notes.length ? h('ul.small.muted', notes.map((n) => h('li', n))) : null, h('pre', f.yaml),
            h('div.row', h('button.primary', { type: 'button', onclick: () => ctx.go('/agents/~new', { yaml: f.yaml }) }, 'Open in the agent editor')));
        } else if (f.type === 'error') out.append(errorBox(f.error || {}));
      });
    } catch (e) { out.append(errorBox(e)); }
  }
  await load();
}
