// events.js — the one WS /v1/events connection of the page: every topic, dispatched to the views that
// listen; reconnects with exponential backoff (0.5 s doubling to 15 s, with jitter), pings every 20 s
// and treats a missing pong as a dead socket; shows live/offline in the header and tells the views when
// the connection comes back so they can reload what they missed.

import { socketURL } from './api.js';

export class EventSocket {
  constructor(indicator) {
    this.indicator = indicator;
    this.listeners = new Set();
    this.reconnectListeners = new Set();
    this.backoff = 500;
    this.activeRuns = [];
    this.everOpen = false;
  }

  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  onReconnect(fn) { this.reconnectListeners.add(fn); return () => this.reconnectListeners.delete(fn); }

  state(s, text) {
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
      const wasDown = this.everOpen;
      this.everOpen = true;
      this.backoff = 500;
      this.state('live', 'live');
      if (wasDown) for (const fn of this.reconnectListeners) fn();
      this.pinger = setInterval(() => {
        if (pongDue && Date.now() > pongDue) { ws.close(); return; }
        pongDue = Date.now() + 10000;
        ws.send(JSON.stringify({ type: 'ping' }));
      }, 20000);
    };
    ws.onmessage = (m) => {
      let ev; try { ev = JSON.parse(m.data); } catch { return; }
      if (ev.type === 'pong') { pongDue = 0; return; }
      if (ev.type === 'hello') { this.activeRuns = (ev.payload && ev.payload.activeRuns) || []; }
      for (const fn of this.listeners) {
        try { fn(ev); } catch (e) { console.warn('event listener', e); }
      }
    };
    ws.onclose = () => {
      clearInterval(this.pinger);
      if (this.ws !== ws) return;
      const wait = this.backoff + Math.random() * 250;
      this.backoff = Math.min(this.backoff * 2, 15000);
      this.state('offline', `offline — retrying in ${Math.ceil(wait / 1000)} s`);
      this.retry = setTimeout(() => this.connect(), wait);
    };
  }
}
