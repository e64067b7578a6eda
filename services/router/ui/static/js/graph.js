// graph.js: a task's tree of sub-tasks and its dependency graph, drawn as
// SVG: boxes (status colour, title, link to the task) and edges.

import {s, taskHref, statusName} from './dom.js';

const BW = 150, BH = 40, GX = 24, GY = 46;

function label(t) {
  const text = t.title || t.id;
  return text.length > 22 ? text.slice(0, 21) + '…' : text;
}

function node(t, x, y, current) {
  const a = s('a', {href: taskHref(t.id), class: 'node st-' + statusName(t.status) + (current ? ' current' : '')},
    s('title', null, `${t.title || t.id} (${statusName(t.status)}) ${t.agent || ''}`),
    s('rect', {x, y, width: BW, height: BH, rx: 6}),
    s('text', {x: x + 8, y: y + 16, class: 'n-title'}, label(t)),
    s('text', {x: x + 8, y: y + 31, class: 'n-sub'}, `${statusName(t.status)} · ${t.agent || ''}`));
  return a;
}

function frame(w, h, title) {
  return s('svg', {viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img', 'aria-label': title, class: 'graph'},
    s('title', null, title),
    s('defs', null, s('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
      s('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead'}))));
}

// tree draws tasks (each with id, parent_task_id) from root down.
export function tree(tasks, rootId, currentId) {
  const kids = new Map();
  const byId = new Map(tasks.map((t) => [t.id, t]));
  for (const t of tasks) {
    if (t.id === rootId || !byId.has(t.parent_task_id)) continue;
    if (!kids.has(t.parent_task_id)) kids.set(t.parent_task_id, []);
    kids.get(t.parent_task_id).push(t);
  }
  const pos = new Map();
  let leaf = 0, depthMax = 0;
  const place = (id, depth) => {
    depthMax = Math.max(depthMax, depth);
    const cs = kids.get(id) || [];
    if (cs.length === 0) { pos.set(id, {x: leaf++, d: depth}); return; }
    cs.forEach((c) => place(c.id, depth + 1));
    const xs = cs.map((c) => pos.get(c.id).x);
    pos.set(id, {x: (Math.min(...xs) + Math.max(...xs)) / 2, d: depth});
  };
  if (!byId.has(rootId)) return null;
  place(rootId, 0);
  const w = Math.max(1, leaf) * (BW + GX) + GX, hh = (depthMax + 1) * (BH + GY) + GY / 2;
  const svg = frame(w, hh, `Tree of ${pos.size} tasks under ${rootId}`);
  const at = (id) => { const p = pos.get(id); return {x: GX / 2 + p.x * (BW + GX), y: GY / 2 + p.d * (BH + GY)}; };
  for (const [pid, cs] of kids) {
    if (!pos.has(pid)) continue;
    const p = at(pid);
    for (const c of cs) {
      const q = at(c.id);
      svg.append(s('path', {d: `M${p.x + BW / 2},${p.y + BH} C${p.x + BW / 2},${p.y + BH + GY / 2} ${q.x + BW / 2},${q.y - GY / 2} ${q.x + BW / 2},${q.y}`, class: 'edge'}));
    }
  }
  for (const id of pos.keys()) { const p = at(id); svg.append(node(byId.get(id), p.x, p.y, id === currentId)); }
  return svg;
}

// dag draws tasks and their depends_on edges (parent → dependent), in
// layers by longest path from a task with no parents shown.
export function dag(tasks, currentId) {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const layer = new Map();
  const depth = (id, seen = new Set()) => {
    if (layer.has(id)) return layer.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const ps = (byId.get(id).depends_on || []).filter((p) => byId.has(p));
    const d = ps.length ? 1 + Math.max(...ps.map((p) => depth(p, seen))) : 0;
    layer.set(id, d);
    return d;
  };
  tasks.forEach((t) => depth(t.id));
  const layers = [];
  for (const [id, d] of layer) (layers[d] = layers[d] || []).push(id);
  const wide = Math.max(...layers.map((l) => l.length));
  const w = wide * (BW + GX) + GX, hh = layers.length * (BH + GY) + GY / 2;
  const svg = frame(w, hh, `Dependency graph of ${tasks.length} tasks`);
  const at = new Map();
  layers.forEach((ids, d) => ids.forEach((id, i) => at.set(id, {x: GX / 2 + i * (BW + GX) + ((wide - ids.length) * (BW + GX)) / 2, y: GY / 2 + d * (BH + GY)})));
  for (const t of tasks) {
    for (const p of t.depends_on || []) {
      if (!at.has(p)) continue;
      const a = at.get(p), b = at.get(t.id);
      svg.append(s('line', {x1: a.x + BW / 2, y1: a.y + BH, x2: b.x + BW / 2, y2: b.y - 2, class: 'edge', 'marker-end': 'url(#arrow)'}));
    }
  }
  for (const [id, p] of at) svg.append(node(byId.get(id), p.x, p.y, id === currentId));
  return svg;
}
