// tasks.js: the task list, live. It lists the newest tasks and opens the
// org's change stream (WatchTasks, /v1/tasks:watch) at once; when the
// stream says it stands ("ready") it lists again, so that nothing that
// happened between the first list and the stream is missed (the first
// list draws the page without waiting for the stream). Then it applies
// each change newer than the row it has: status, agent, cost and steps
// move as they happen, new tasks appear on top, and nothing is fetched
// again unless the stream says it may have missed something (reset).
// Changes that come while a list is on its way are held and applied to
// the rows it brings.

import {h, replace, taskLink, statusBadge, priorityName, chips, age, money, num, announce} from './dom.js';
import {get, query, stream} from './api.js';

const PAGE = 50;
const statuses = ['created', 'queued', 'assigned', 'running', 'blocked', 'completed', 'failed', 'cancelled'];
const priorities = ['critical', 'high', 'normal', 'low', 'backlog'];

function filtersFromURL() {
  const q = new URLSearchParams(location.search);
  return {status: q.get('status') || '', agent: q.get('agent') || '', tag: q.get('tag') || '', priority: q.get('priority') || '', page: q.get('page_token') || ''};
}

function select(id, label, name, value, options) {
  return [h('label', {for: id}, label),
    h('select', {id, name}, h('option', {value: ''}, 'any'), options.map((o) => h('option', {value: o, selected: o === value}, o)))];
}

function filterForm(f) {
  return h('form', {method: 'get', action: '/ui/tasks', class: 'filters', role: 'search', 'aria-label': 'Filter tasks'},
    select('f-status', 'Status', 'status', f.status, statuses),
    h('label', {for: 'f-agent'}, 'Agent'), h('input', {id: 'f-agent', name: 'agent', value: f.agent, size: 14, spellcheck: 'false'}),
    h('label', {for: 'f-tag'}, 'Tag'), h('input', {id: 'f-tag', name: 'tag', value: f.tag, size: 10, spellcheck: 'false'}),
    select('f-priority', 'Priority', 'priority', f.priority, priorities),
    h('button', {type: 'submit'}, 'Filter'),
    h('a', {href: '/ui/tasks', class: 'button secondary'}, 'Clear'));
}

function searchForm() {
  const input = h('input', {id: 'f-id', name: 'id', placeholder: 'task id', size: 28, spellcheck: 'false', required: true, class: 'mono'});
  return h('form', {class: 'search', role: 'search', 'aria-label': 'Find a task by id', onsubmit: (e) => {
    e.preventDefault();
    const id = input.value.trim();
    if (id) location.assign('/ui/tasks/' + encodeURIComponent(id));
  }}, h('label', {for: 'f-id'}, 'Task id'), input, h('button', {type: 'submit'}, 'Open'));
}

const cols = [
  {label: 'Task', cell: (t) => [taskLink(t.id), t.parent_task_id ? h('span', {class: 'muted small', title: 'sub-task of ' + t.parent_task_id}, ' ↳') : '']},
  {label: 'Title', cell: (t) => t.title || h('span', {class: 'muted'}, '(untitled)')},
  {label: 'Status', cell: (t) => statusBadge(t.status)},
  {label: 'Agent', cell: (t) => t.agent || ''},
  {label: 'Priority', cell: (t) => priorityName(t.priority)},
  {label: 'Tags', cell: (t) => chips(t.tags)},
  {label: 'Age', cls: 'num', cell: (t) => h('time', {datetime: t.created_at || '', 'data-age': t.created_at || ''}, age(t.created_at))},
  {label: 'Steps', cls: 'num', cell: (t) => String(num(t.step_count))},
  {label: 'Cost', cls: 'num', cell: (t) => money(t.usage && t.usage.cost_usd)},
];

function row(t) {
  return h('tr', {'data-id': t.id, class: 'st-row-' + (t.status || '').toLowerCase()}, cols.map((c) => h('td', {class: c.cls}, c.cell(t))));
}

export async function tasksPage(main) {
  const f = filtersFromURL();
  const live = h('span', {class: 'live', role: 'status'}, 'connecting…');
  const body = h('tbody');
  const more = h('p', {class: 'pager'});
  const tableEl = h('table', {class: 'tasks'},
    h('caption', null, 'Tasks, newest first ', live),
    h('thead', null, h('tr', null, cols.map((c) => h('th', {scope: 'col', class: c.cls}, c.label)))), body);
  replace(main, h('div', {class: 'title-row'}, h('h1', null, 'Tasks'), searchForm()), filterForm(f),
    h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'}), tableEl, more);

  const rows = new Map(); // id → task as the list holds it
  const listParams = {page_size: PAGE, statuses: f.status ? 'TASK_STATUS_' + f.status.toUpperCase() : '', agent: f.agent, tag: f.tag,
    priorities: f.priority ? 'PRIORITY_' + f.priority.toUpperCase() : '', page_token: f.page};

  const matches = (t) => (!f.status || t.status === 'TASK_STATUS_' + f.status.toUpperCase()) &&
    (!f.agent || !t.agent || t.agent === f.agent) && (!f.tag || (t.tags || []).includes(f.tag)) &&
    (!f.priority || !t.agent || (t.priority || 'PRIORITY_NORMAL') === 'PRIORITY_' + f.priority.toUpperCase());

  const draw = (t) => {
    const old = body.querySelector(`tr[data-id="${CSS.escape(t.id)}"]`);
    if (!matches(t)) { if (old) old.remove(); rows.delete(t.id); return; }
    const tr = row(t);
    if (old) old.replaceWith(tr); else body.prepend(tr);
    while (body.rows.length > PAGE) { const last = body.rows[body.rows.length - 1]; rows.delete(last.dataset.id); last.remove(); }
  };

  let listing = 0, gen = 0;
  let held = [];
  async function list() {
    listing++;
    const mine = ++gen;
    try {
      const resp = await get('/v1/tasks' + query(listParams));
      if (mine !== gen) { listing--; return; } // a newer list is on its way
      rows.clear();
      const tasks = resp.tasks || [];
      for (const t of tasks) rows.set(t.id, t);
      body.replaceChildren(...tasks.map(row));
      if (--listing === 0) {
        const changes = held;
        held = [];
        changes.forEach(apply);
      }
      if (tasks.length === 0) announce('No tasks match.');
      else announce('');
      replace(more, resp.next_page_token ? h('a', {href: '/ui/tasks' + query({status: f.status, agent: f.agent, tag: f.tag, priority: f.priority, page_token: resp.next_page_token})}, 'Older tasks →') : '');
    } catch (err) {
      listing = Math.max(0, listing - 1);
      announce('Could not list tasks: ' + err.message, true);
    }
  }

  // A row's task, fetched when a change makes an unknown task match the
  // filter (a task failing under status=failed, say).
  async function fetchRow(id) {
    try {
      const {task} = await get('/v1/tasks/' + encodeURIComponent(id));
      if (!rows.has(id)) { rows.set(id, task); draw(task); }
    } catch { /* gone, or not ours: nothing to show */ }
  }

  function apply(c) {
    if (listing > 0) { held.push(c); return; }
    const seq = num(c.seq);
    let t = rows.get(c.task_id);
    if (t && seq <= num(t.last_event_seq)) return;
    if (!t) {
      if (!c.created) {
        if (f.status && c.status === 'TASK_STATUS_' + f.status.toUpperCase()) fetchRow(c.task_id);
        return;
      }
      t = {id: c.task_id, title: c.created.title, tags: c.created.tags || [], parent_task_id: c.created.parent_task_id,
        created_at: c.created_at, status: 'TASK_STATUS_CREATED', usage: {cost_usd: 0}, step_count: 0, last_event_seq: 0};
    } else t = {...t, usage: {...(t.usage || {})}};
    if (c.status) t.status = c.status;
    if (c.agent) { t.agent = c.agent; t.priority = c.priority; }
    if (c.usage) t.usage.cost_usd = num(t.usage.cost_usd) + num(c.usage.cost_usd);
    t.step_count = num(t.step_count) + num(c.steps);
    t.last_event_seq = seq;
    if (c.updated) { fetchRow(t.id); }
    rows.set(t.id, t);
    draw(t);
  }

  // Ages move on without asking anything.
  setInterval(() => {
    const now = Date.now();
    for (const el of body.querySelectorAll('time[data-age]')) el.textContent = age(el.dataset.age, now);
  }, 5000);

  if (f.page) { // an older page is not live
    live.textContent = '';
    return list();
  }
  list();
  const watch = {statuses: listParams.statuses, agent: f.agent, priorities: listParams.priorities};
  stream('/v1/tasks:watch' + query(watch), {
    ready: () => list(),
    changes: (resp) => (resp.changes || []).forEach(apply),
    reset: () => list(),
  }, (state) => {
    live.textContent = state === 'live' ? '● live' : state === 'reconnecting' ? 'reconnecting…' : 'disconnected';
    live.className = 'live is-' + state;
  });
}

