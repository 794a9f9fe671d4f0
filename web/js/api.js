// api.js — every call to /v1: the bearer token (sessionStorage, asked once through the token dialog),
// the error envelope as ApiError, Server-Sent Events read from fetch (POST streams and GET follows), and
// WebSocket URLs carrying ?token= (browsers cannot set headers on sockets).

const TOKEN_KEY = 'agentd.token';

export class ApiError extends Error {
  constructor(status, code, message, hint) {
    super(message || code || `HTTP ${status}`);
    this.status = status; this.code = code || ''; this.hint = hint || '';
  }
}

export const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

let pendingPrompt = null;

// askToken shows the token dialog once, however many requests were refused together.
function askToken(previousWasWrong) {
  if (pendingPrompt) return pendingPrompt;
  pendingPrompt = new Promise((resolve) => {
    const dlg = document.getElementById('token-dialog');
    const input = document.getElementById('token-input');
    const err = document.getElementById('token-error');
    err.hidden = !previousWasWrong;
    err.textContent = previousWasWrong ? 'That token was refused; try again.' : '';
    input.value = '';
    dlg.addEventListener('close', function done() {
      dlg.removeEventListener('close', done);
      const v = input.value.trim();
      if (!v) { pendingPrompt = null; dlg.showModal(); return; }
      sessionStorage.setItem(TOKEN_KEY, v);
      pendingPrompt = null;
      resolve(v);
    });
    dlg.addEventListener('cancel', (e) => e.preventDefault(), { once: true });
    dlg.showModal();
    input.focus();
  });
  return pendingPrompt;
}

function headers(extra) {
  const h = new Headers(extra || {});
  const t = token();
  if (t) h.set('Authorization', 'Bearer ' + t);
  return h;
}

async function failure(res) {
  let env = null;
  try { env = await res.json(); } catch { /* not JSON */ }
  const e = env && env.error ? env.error : {};
  return new ApiError(res.status, e.code, e.message || res.statusText, e.hint);
}

// request: fetch with the token; a 401 asks for the token and retries.
async function request(method, path, init) {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(path, { method, ...init, headers: headers(init.headers) });
    if (res.status === 401 && attempt < 5) {
      await askToken(!!token());
      continue;
    }
    if (!res.ok) throw await failure(res);
    return res;
  }
}

// api: a JSON call. body: an object (sent as JSON), or {raw, type} for bytes. Answers the decoded JSON,
// null for 204, a Blob when opts.blob.
export async function api(method, path, body, opts = {}) {
  const init = { headers: {}, signal: opts.signal };
  if (body && body.raw !== undefined) {
    init.body = body.raw; init.headers['Content-Type'] = body.type || 'application/octet-stream';
  } else if (body !== undefined) {
    init.body = JSON.stringify(body); init.headers['Content-Type'] = 'application/json';
  }
  const res = await request(method, path, init);
  if (res.status === 204) return null;
  if (opts.blob) return res.blob();
  const ct = res.headers.get('Content-Type') || '';
  return ct.includes('json') ? res.json() : res.text();
}

export const get = (path, opts) => api('GET', path, undefined, opts);
export const post = (path, body, opts) => api('POST', path, body === undefined ? {} : body, opts);

// stream: a Server-Sent Events request; calls onFrame(data, eventName, id) for each data frame and
// resolves at `event: done` or the end of the body. Aborting the signal ends it quietly.
export async function stream(method, path, body, onFrame, signal) {
  const init = { headers: { Accept: 'text/event-stream' }, signal };
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers['Content-Type'] = 'application/json'; }
  const res = await request(method, path, init);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i); buf = buf.slice(i + 2);
        let name = 'message', data = '', id = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('data:')) data += line.slice(5).trimStart();
          else if (line.startsWith('event:')) name = line.slice(6).trim();
          else if (line.startsWith('id:')) id = line.slice(3).trim();
        }
        if (name === 'done') return;
        if (!data) continue;
        let obj; try { obj = JSON.parse(data); } catch { obj = { type: 'raw', data }; }
        onFrame(obj, name, id);
      }
    }
  } catch (e) {
    if (signal && signal.aborted) return;
    throw e;
  } finally {
    reader.releaseLock?.();
  }
}

// socketURL: a same-origin ws(s) URL with the token as ?token= when one is set.
export function socketURL(path) {
  const u = new URL(path, location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (token()) u.searchParams.set('token', token());
  return u.toString();
}

export const enc = encodeURIComponent;
