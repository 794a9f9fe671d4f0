// events.js — a WS /v1/events connection: reconnects with exponential backoff (0.5 s doubling to 15 s,
// with jitter), pings every 20 s and treats a missing pong as a dead socket; dispatches every frame to
// its listeners. The page's shared one (app.js: every topic, no subscribe, so no replay reaches the
// views) shows live/offline in the header; each time the server's hello arrives on it (it subscribed:
// every later event reaches the page) — the first open as much as a reconnect — it counts the open
// (opens) and tells the reconnect listeners, so the views reload what they fetched before it: what
// changed while the page had no socket reaches it over neither. A socket made with topics (the Events
// view's own, eventlog.js) sends {type: subscribe, topics} on each hello, so the server replays its
// history for them after `subscribed` (replayed and live frames alike go to the listeners); close() ends it.

import { socketURL } from './api.js';

export class EventSocket {
  constructor(indicator, topics) {
    this.indicator = indicator; // the header's live/offline, or null
    this.topics = topics; // subscribe to these on each open (the server replays their history), or none
    this.listeners = new Set();
    this.reconnectListeners = new Set();
    this.backoff = 500;
    this.activeRuns = [];
    this.opens = 0; // hellos received (app.js: did one come while a view loaded?)
  }

  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  onReconnect(fn) { this.reconnectListeners.add(fn); return () => this.reconnectListeners.delete(fn); }

  state(s, text) {
    if (!this.indicator) return;
    this.indicator.className = 'conn ' + s;
    this.indicator.textContent = text;
    this.indicator.title = s === 'offline' ? 'The live connection is down; retrying.' : '';
    document.body.classList.toggle('is-offline', s === 'offline');
  }

  connect() {
    clearTimeout(this.retry);
    const ws = new WebSocket(socketURL('/v1/events'));
    this.ws = ws;
    let pongDue = 0;
    ws.onopen = () => {
      this.backoff = 500;
      this.state('live', 'live');
      this.pinger = setInterval(() => {
        if (pongDue && Date.now() > pongDue) { ws.close(); return; }
        pongDue = Date.now() + 10000;
        ws.send(JSON.stringify({ type: 'ping' }));
      }, 20000);
    };
    ws.onmessage = (m) => {
      let ev; try { ev = JSON.parse(m.data); } catch { return; }
      if (ev.type === 'pong') { pongDue = 0; return; }
      if (ev.type === 'hello') {
        if (this.topics) ws.send(JSON.stringify({ type: 'subscribe', topics: this.topics }));
        this.activeRuns = (ev.payload && ev.payload.activeRuns) || [];
        this.opens++;
        for (const fn of this.reconnectListeners) {
          try { fn(); } catch (e) { console.warn('reconnect listener', e); }
        }
      }
      for (const fn of this.listeners) {
        try { fn(ev); } catch (e) { console.warn('event listener', e); }
      }
    };
    ws.onclose = () => {
      clearInterval(this.pinger);
      if (this.ws !== ws || this.closed) return;
      const wait = this.backoff + Math.random() * 250;
      this.backoff = Math.min(this.backoff * 2, 15000);
      this.state('offline', `offline — retrying in ${Math.ceil(wait / 1000)} s`);
      this.retry = setTimeout(() => this.connect(), wait);
    };
  }

  close() {
    this.closed = true;
    clearTimeout(this.retry);
    clearInterval(this.pinger);
    this.ws?.close();
  }
}
