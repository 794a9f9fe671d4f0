// ui.js — small DOM and formatting helpers shared by the views: h() builds elements, the formatters
// (relative time, cost, duration, tokens), status badges, tables, toasts and error panels.

// h('tag.class#id', {attrs, on*: handlers}, ...children) → element. Strings become text nodes (never HTML).
export function h(sel, attrs, ...kids) {
  const [, tag = 'div', rest = ''] = /^([a-z0-9-]*)(.*)$/i.exec(sel);
  const el = document.createElement(tag || 'div');
  for (const m of rest.matchAll(/([.#])([^.#]+)/g)) {
    if (m[1] === '.') el.classList.add(m[2]); else el.id = m[2];
  }
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) { kids.unshift(attrs); attrs = null; }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else el.append(k instanceof Node ? k : String(k));
  }
}

export function clear(el, ...kids) { el.replaceChildren(); append(el, kids); return el; }

export function ago(iso) {
  if (!iso) return '';
  const s = (Date.now() - Date.parse(iso)) / 1000;
  const a = Math.abs(s), sfx = s >= 0 ? ' ago' : '';
  const pre = s < 0 ? 'in ' : '';
  if (a < 45) return s >= 0 ? 'just now' : 'in a moment';
  if (a < 5400) return pre + Math.round(a / 60) + 'm' + sfx;
  if (a < 129600) return pre + Math.round(a / 3600) + 'h' + sfx;
  return pre + Math.round(a / 86400) + 'd' + sfx;
}

export const time = (iso) => h('time', { datetime: iso, title: iso || '' }, ago(iso));
export const cost = (usd) => (usd ? '$' + (usd < 0.01 ? String(+usd.toPrecision(2)) : usd.toFixed(3)) : '$0');
export const num = (n) => (n || 0).toLocaleString('en-US');
export function dur(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.floor(ms / 60000) + 'm ' + Math.round((ms % 60000) / 1000) + 's';
}
export const badge = (text, cls) => h('span.badge', { class: 'badge ' + (cls || text) }, text);
export const json = (v) => JSON.stringify(v, null, 2);
export const link = (href, text) => h('a', { href }, text);

// table(columns, rows, {onRow, empty}): columns are [title, (row) => content, 'num'?].
export function table(columns, rows, opts = {}) {
  if (!rows.length) return h('p.empty', opts.empty || 'Nothing yet.');
  const body = h('tbody');
  for (const r of rows) body.append(tableRow(columns, r, opts));
  return h('div.table-wrap', h('table', opts.label ? { 'aria-label': opts.label } : null,
    h('thead', h('tr', columns.map(([t, , c]) => h('th', { class: c || null, scope: 'col' }, t)))), body));
}

export function tableRow(columns, r, opts = {}) {
  const tr = h('tr', columns.map(([, f, c]) => h('td', { class: c || null }, f(r))));
  if (opts.onRow) {
    tr.classList.add('clickable');
    tr.addEventListener('click', (e) => { if (!e.target.closest('a,button,input,select')) opts.onRow(r); });
  }
  if (opts.key) tr.dataset.key = opts.key(r);
  return tr;
}

export function toast(msg, bad) {
  const t = h('div.toast', { class: 'toast' + (bad ? ' bad' : ''), role: bad ? 'alert' : 'status' }, msg);
  document.getElementById('toasts').append(t);
  setTimeout(() => t.remove(), bad ? 8000 : 3500);
}

// errorBox: an ApiError (or any error) as a readable panel: message, code, hint.
export function errorBox(e) {
  return h('div.panel.error', { role: 'alert' }, h('strong', e.code || 'Error'), ': ', e.message || String(e),
    e.hint ? h('div.small.muted', 'Hint: ', e.hint) : null);
}

export function fail(e) { toast((e.code ? e.code + ': ' : '') + (e.message || e) + (e.hint ? ' — ' + e.hint : ''), true); }

// field(label, control): a labelled form control.
let fieldSeq = 0;
export function field(label, control) {
  if (!control.id) control.id = 'f' + (++fieldSeq);
  return h('div.field', h('label', { for: control.id }, label), control);
}

// debounce: fn called once, delay ms after the last call.
// latest orders a view's reloads: they overlap (a live event, a click, a reconnect) and may answer out of
// order, so each load takes a turn and draws only if no later load has started: `const mine = turn(); ...
// if (!mine()) return;`.
export function latest() {
  let n = 0;
  return () => { const mine = ++n; return () => mine === n; };
}

export function debounce(fn, ms) {
  let t;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

// dataURL: a Blob as a data: URL (an image fetched with the token is shown this way: the page's CSP
// allows data: images, not blob:).
export function dataURL(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(blob);
  });
}

export function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: name });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 5000);
}
