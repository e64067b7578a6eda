// dom.js: building the page. Every value goes in as a text node or an
// attribute, never as HTML: nothing a task, a model or a tool wrote can
// become markup or script (the page's Content-Security-Policy also
// requires Trusted Types, so an HTML sink would throw).

const SVG = 'http://www.w3.org/2000/svg';

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// h builds an HTML element: h('a', {href: '/ui/'}, 'text', child, ...).
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

// replace puts children in el instead of what it held.
export function replace(el, ...children) {
  el.replaceChildren();
  return fill(el, null, children);
}

export function meta(name) {
  const m = document.querySelector(`meta[name="${name}"]`);
  return m ? m.getAttribute('content') : '';
}

// taskHref is a task page's address (ids are ULIDs; escaped all the same).
export function taskHref(id) { return '/ui/tasks/' + encodeURIComponent(id); }
export function agentHref(name) { return '/ui/agents/' + encodeURIComponent(name); }

export function taskLink(id, label) {
  return h('a', {href: taskHref(id), class: 'mono'}, label || id);
}

// short names of the API's enums.
export function enumName(v, prefix) {
  if (v === undefined || v === null || v === '') return '';
  return String(v).replace(prefix, '').toLowerCase();
}
export const statusName = (v) => enumName(v || 'TASK_STATUS_UNSPECIFIED', 'TASK_STATUS_');
export const priorityName = (v) => enumName(v || 'PRIORITY_NORMAL', 'PRIORITY_');

export const terminal = new Set(['TASK_STATUS_COMPLETED', 'TASK_STATUS_FAILED', 'TASK_STATUS_CANCELLED']);

export function statusBadge(v) {
  const n = statusName(v);
  return h('span', {class: 'badge st-' + n}, n);
}

export function num(v) { const n = Number(v); return Number.isFinite(n) ? n : 0; }

export function money(v) {
  const n = num(v);
  if (n === 0) return '$0';
  if (n < 0.01) return '$' + n.toFixed(4);
  return '$' + n.toFixed(n < 10 ? 3 : 2);
}

export function tokens(u) {
  if (!u) return '0';
  return num(u.total_tokens).toLocaleString('en');
}

// age says how long ago an RFC 3339 time was.
export function age(ts, now = Date.now()) {
  if (!ts) return '';
  const sec = Math.max(0, Math.round((now - Date.parse(ts)) / 1000));
  if (sec < 60) return sec + 's';
  if (sec < 3600) return Math.floor(sec / 60) + 'm';
  if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
  return Math.floor(sec / 86400) + 'd';
}

export function when(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return d.toLocaleString('en-GB', {hour12: false});
}

// seconds of a protobuf Duration in JSON ("1.5s").
export function durSeconds(d) {
  if (!d) return 0;
  return num(String(d).replace(/s$/, ''));
}

export function dur(sec) {
  if (!sec) return '0';
  if (sec < 0.001) return '<1 ms';
  if (sec < 1) return Math.round(sec * 1000) + ' ms';
  if (sec < 60) return (Number.isInteger(sec) ? String(sec) : sec.toFixed(sec < 10 ? 2 : 1)) + ' s';
  if (sec < 3600) return Math.floor(sec / 60) + 'm ' + Math.round(sec % 60) + 's';
  return Math.floor(sec / 3600) + 'h ' + Math.round((sec % 3600) / 60) + 'm';
}

// pretty shows JSON text indented when it parses, as given otherwise.
export function pretty(text) {
  if (!text) return '';
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

// dl builds a description list from [term, value] pairs (empty values skipped).
export function dl(pairs, cls) {
  const out = h('dl', {class: cls || 'facts'});
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === '' || (Array.isArray(v) && v.length === 0)) continue;
    out.append(h('dt', null, k), h('dd', null, v));
  }
  return out;
}

export function chips(list) {
  return (list || []).map((t) => h('span', {class: 'chip'}, t));
}

// section is a titled panel.
export function section(title, ...children) {
  const id = 'sec-' + title.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return h('section', {class: 'panel', 'aria-labelledby': id}, h('h2', {id}, title), ...children);
}

// announce says something to screen readers (and shows it) in the page's
// status line.
export function announce(text, isError) {
  const el = document.getElementById('announce');
  if (!el) return;
  el.className = isError ? 'error' : 'muted';
  el.textContent = text;
}

// table builds a table: columns [{label, cell(row) → node|text, cls}].
export function table(caption, columns, rows, rowAttrs) {
  const t = h('table', null,
    h('caption', null, caption),
    h('thead', null, h('tr', null, columns.map((c) => h('th', {scope: 'col', class: c.cls}, c.label)))));
  const body = h('tbody');
  for (const r of rows) body.append(h('tr', rowAttrs ? rowAttrs(r) : null, columns.map((c) => h('td', {class: c.cls}, c.cell(r)))));
  t.append(body);
  return t;
}

// debounce runs fn at most once per ms, after the last call.
export function debounce(fn, ms) {
  let t = 0;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}
