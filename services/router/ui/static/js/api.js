// api.js: the dashboard's calls. /ui/api/v1/... is the REST API called
// with the session's key (the server adds it; this page never sees it).
// Changes carry the session's CSRF token.

import {meta} from './dom.js';

const csrf = meta('am-csrf');

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function signIn() {
  location.assign('/ui/signin?next=' + encodeURIComponent(location.pathname + location.search));
}

// call sends one request and returns the JSON answer (or throws ApiError).
export async function call(method, path, body) {
  const headers = {Accept: 'application/json'};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET') headers['X-CSRF-Token'] = csrf;
  const res = await fetch('/ui/api' + path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) {
    signIn();
    throw new ApiError(401, 'signed out');
  }
  let data = {};
  if (res.status !== 204) data = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiError(res.status, data.message || res.statusText, data);
  return data;
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body || {});
export const del = (path) => call('DELETE', path);

// query builds "?a=1&b=2" from an object (arrays repeat, empty skipped).
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    for (const x of Array.isArray(v) ? v : [v]) if (x !== '') q.append(k, x);
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// stream follows an event stream of the REST API. handlers maps event
// names to functions of the parsed data; onState hears 'live',
// 'reconnecting' and 'closed'. EventSource reconnects by itself (a task's
// stream with its Last-Event-ID cursor).
export function stream(path, handlers, onState) {
  const es = new EventSource('/ui/api' + path);
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (e) => {
      let data = null;
      try { data = e.data ? JSON.parse(e.data) : null; } catch { return; }
      fn(data, e);
    });
  }
  es.addEventListener('open', () => onState && onState('live'));
  es.addEventListener('error', () => {
    if (!onState) return;
    if (es.readyState === EventSource.CLOSED) {
      onState('closed');
      // A stream refused because the session ended: back to sign-in.
      fetch('/ui/api/v1/version', {credentials: 'same-origin'}).then((r) => { if (r.status === 401) signIn(); }, () => {});
    } else onState('reconnecting');
  });
  window.addEventListener('pagehide', () => es.close());
  return es;
}
