// memory.js: what the org's agents keep (docs/memory.md) — its threads
// (ThreadService: the list, a thread's conversation, delete for an
// operator), its long-term memories (MemoryService.ListMemories: text,
// scope, tags, provenance; delete for an admin) and its working state
// (ListState, one scope at a time). A memory's text and a state value are
// data a model or a tool wrote: they go in as text nodes only, like every
// value on the dashboard. The filters live in the address (?m_scope=…), so
// a view can be reloaded and shared.

import {h, replace, section, chips, table, when, age, taskLink, statusBadge, num} from './dom.js';
import {get, del, query} from './api.js';
import {session} from './session.js';

const enc = encodeURIComponent;
const scopes = ['task-tree', 'agent', 'org'];
const PAGE = 50;

// params reads and writes the page's filters in the address.
function params() { return new URLSearchParams(location.search); }
function setParams(values) {
  const q = params();
  for (const [k, v] of Object.entries(values)) { if (v) q.set(k, v); else q.delete(k); }
  const s = q.toString();
  history.replaceState(null, '', location.pathname + (s ? '?' + s : ''));
}

// status is a section's own live region: what it did, or why it could not.
function statusLine(id) { return h('p', {id, class: 'muted', role: 'status', 'aria-live': 'polite'}); }
function say(el, text, isError) { el.className = isError ? 'error' : 'muted'; el.textContent = text; }

function scopeSelect(id, name, value, withAny) {
  return [h('label', {for: id}, 'Scope'),
    h('select', {id, name}, withAny ? h('option', {value: ''}, 'any') : '', scopes.map((s) => h('option', {value: s, selected: s === value}, s)))];
}

// scopeForm is a section's filter: a scope, its scope id and one more
// text field (p: the fields' name prefix; f: the current values). apply
// hears the new values, also written to the address.
function scopeForm(p, label, f, withAny, extra, apply) {
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': label, onsubmit: (e) => {
    e.preventDefault();
    const d = new FormData(form);
    const v = {scope: d.get(p + '_scope'), scope_id: String(d.get(p + '_scope_id')).trim(), [extra.key]: String(d.get(p + '_' + extra.key)).trim()};
    setParams({[p + '_scope']: v.scope, [p + '_scope_id']: v.scope_id, [p + '_' + extra.key]: v[extra.key]});
    apply(v);
  }},
  scopeSelect(p + '-scope', p + '_scope', f.scope, withAny),
  h('label', {for: p + '-scope-id'}, 'Scope id'),
  h('input', {id: p + '-scope-id', name: p + '_scope_id', value: f.scope_id, size: 18, spellcheck: 'false', placeholder: 'agent name or root task'}),
  h('label', {for: p + '-' + extra.key}, extra.label),
  h('input', {id: p + '-' + extra.key, name: p + '_' + extra.key, value: f[extra.key], size: 12, spellcheck: 'false'}),
  h('button', {type: 'submit'}, 'Show'));
  return form;
}

function scopeText(scope, scopeID) {
  return [h('span', {class: 'chip'}, scope || ''), scopeID ? [' ', h('code', null, scopeID)] : ''];
}

// provenance says who wrote an entry: the task and its agent version, or
// the API key.
function provenance(p) {
  if (!p) return '';
  const out = [];
  if (p.task_id) out.push(h('div', null, 'task ', taskLink(p.task_id)));
  if (p.agent) out.push(h('div', null, 'agent ', h('code', null, p.agent), p.agent_version ? ' v' + num(p.agent_version) : ''));
  if (p.key_name) out.push(h('div', null, 'key ', h('code', null, p.key_name)));
  return out;
}

// ---- threads ----

class Threads {
  constructor() {
    this.say = statusLine('threads-status');
    this.list = h('div');
    this.more = h('p', {class: 'pager'});
    this.detail = h('div', {id: 'thread-detail'});
    this.el = section('Threads', h('p', {class: 'muted small'}, 'Conversations of tasks (submit with thread_id); each task continues the one before.'),
      this.say, this.list, this.more, this.detail);
  }

  async load(token) {
    try {
      const resp = await get('/v1/threads' + query({page_size: PAGE, page_token: token}));
      const threads = resp.threads || [];
      replace(this.list, threads.length ? table(`${threads.length} threads, most recently used first`, [
        {label: 'Thread', cell: (t) => h('button', {type: 'button', class: 'link-button mono', 'aria-controls': 'thread-detail',
          'aria-label': 'Show the tasks of thread ' + t.id, onclick: () => this.open(t.id)}, t.id)},
        {label: 'Agent', cell: (t) => t.agent || ''},
        {label: 'Tasks', cls: 'num', cell: (t) => String(num(t.task_count))},
        {label: 'Newest task', cell: (t) => t.head_task_id ? taskLink(t.head_task_id) : ''},
        {label: 'Used', cell: (t) => h('time', {datetime: t.updated_at || ''}, age(t.updated_at) + ' ago')},
        {label: 'Started', cell: (t) => when(t.created_at)},
      ], threads, (t) => ({'data-thread': t.id})) : h('p', {class: 'muted'}, 'No threads yet.'));
      replace(this.more, resp.next_page_token ? h('button', {type: 'button', class: 'secondary', onclick: () => this.load(resp.next_page_token)}, 'Next threads') : '');
      const open = params().get('thread');
      if (open && !token) await this.open(open, true);
    } catch (err) { say(this.say, 'Could not list threads: ' + err.message, true); }
  }

  async open(id, quiet) {
    setParams({thread: id});
    try {
      const {thread, tasks = []} = await get(`/v1/threads/${enc(id)}` + query({max_tasks: 100}));
      const heading = h('h3', {id: 'thread-title', tabindex: '-1'}, 'Thread ', h('code', null, thread.id));
      replace(this.detail, h('div', {class: 'card', 'data-thread-detail': thread.id, 'aria-labelledby': 'thread-title', role: 'region'},
        heading,
        table(`Its conversation, oldest first (${tasks.length} of ${num(thread.task_count)} tasks)`, [
          {label: 'Task', cell: (t) => taskLink(t.id)},
          {label: 'Title', cell: (t) => t.title || h('span', {class: 'muted'}, '(untitled)')},
          {label: 'Input', cell: (t) => h('pre', {class: 'wrap'}, t.input || '')},
          {label: 'Status', cell: (t) => statusBadge(t.status)},
          {label: 'Agent', cell: (t) => t.agent || ''},
          {label: 'Created', cell: (t) => when(t.created_at)},
        ], tasks),
        session.may('operator') ? h('p', null, h('button', {type: 'button', class: 'danger', onclick: () => this.remove(thread.id)}, 'Delete thread ' + thread.id)) : ''));
      if (!quiet) heading.focus();
    } catch (err) {
      replace(this.detail);
      say(this.say, err.status === 404 ? `No thread ${id} in this org.` : 'Could not read the thread: ' + err.message, true);
    }
  }

  async remove(id) {
    if (!window.confirm(`Delete thread ${id} and its tasks?`)) return;
    try {
      const resp = await del(`/v1/threads/${enc(id)}`);
      setParams({thread: ''});
      replace(this.detail);
      say(this.say, `Deleted thread ${id} and ${num(resp.deleted_tasks)} tasks.`);
      await this.load();
    } catch (err) { say(this.say, 'Delete refused: ' + err.message, true); }
  }
}

// ---- long-term memories ----

class Memories {
  constructor() {
    const q = params();
    this.f = {scope: q.get('m_scope') || '', scope_id: q.get('m_scope_id') || '', tag: q.get('m_tag') || ''};
    this.say = statusLine('memories-status');
    this.list = h('div');
    this.more = h('p', {class: 'pager'});
    const form = scopeForm('m', 'Filter memories', this.f, true, {key: 'tag', label: 'Tag'}, (v) => { this.f = v; this.load(); });
    this.el = section('Long-term memories', h('p', {class: 'muted small'}, 'Texts agents chose to remember (the remember tool), with where they came from. Stored text is data, never instructions.'),
      form, this.say, this.list, this.more);
  }

  async load(token) {
    try {
      const resp = await get('/v1/memories' + query({scope: this.f.scope, scope_id: this.f.scope ? this.f.scope_id : '', tag: this.f.tag, page_size: PAGE, page_token: token}));
      const mems = resp.memories || [];
      const admin = session.may('admin');
      const cols = [
        {label: 'Text', cell: (m) => h('pre', {class: 'wrap memory-text'}, m.text || '')},
        {label: 'Scope', cell: (m) => scopeText(m.scope, m.scope_id)},
        {label: 'Tags', cell: (m) => chips(m.tags)},
        {label: 'Written by', cell: (m) => provenance(m.provenance)},
        {label: 'When', cell: (m) => when(m.created_at)},
        {label: 'Embedding', cell: (m) => [h('code', null, m.embedding_model || ''), ` (${num(m.dimensions)})`]},
      ];
      if (admin) cols.push({label: 'Actions', cell: (m) => h('button', {type: 'button', class: 'danger', 'aria-label': 'Delete memory ' + m.id, onclick: () => this.remove(m.id)}, 'Delete')});
      replace(this.list, mems.length ? table(`${mems.length} memories${token ? ' (next page)' : ''}`, cols, mems, (m) => ({'data-memory': m.id}))
        : h('p', {class: 'muted'}, 'No memories match.'));
      replace(this.more, resp.next_page_token ? h('button', {type: 'button', class: 'secondary', onclick: () => this.load(resp.next_page_token)}, 'Next memories') : '');
      say(this.say, '');
    } catch (err) {
      replace(this.list);
      say(this.say, 'Could not list memories: ' + err.message, true);
    }
  }

  async remove(id) {
    if (!window.confirm(`Delete memory ${id}? (The deletion is audited.)`)) return;
    try {
      await del(`/v1/memories/${enc(id)}`);
      await this.load();
      say(this.say, `Deleted memory ${id}.`);
    } catch (err) { say(this.say, 'Delete refused: ' + err.message, true); }
  }
}

// ---- working state ----

class WorkingState {
  constructor() {
    const q = params();
    this.f = {scope: q.get('s_scope') || 'org', scope_id: q.get('s_scope_id') || '', prefix: q.get('s_prefix') || ''};
    this.say = statusLine('state-status');
    this.list = h('div');
    this.more = h('p', {class: 'pager'});
    const form = scopeForm('s', 'Choose a scope of working state', this.f, false, {key: 'prefix', label: 'Key prefix'}, (v) => { this.f = v; this.load(); });
    this.el = section('Working state', h('p', {class: 'muted small'}, 'Small JSON values under keys (state_set), one scope at a time: the org, an agent (by name) or a task tree (its root task).'),
      form, this.say, this.list, this.more);
  }

  async load(token) {
    if (this.f.scope !== 'org' && !this.f.scope_id) {
      replace(this.list);
      replace(this.more);
      say(this.say, `Name the ${this.f.scope === 'agent' ? 'agent' : 'root task'} in Scope id to list its state.`);
      return;
    }
    try {
      const resp = await get('/v1/state' + query({scope: this.f.scope, scope_id: this.f.scope === 'org' ? '' : this.f.scope_id, prefix: this.f.prefix, page_size: PAGE, page_token: token}));
      const entries = resp.entries || [];
      replace(this.list, entries.length ? table(`${entries.length} keys in ${this.f.scope}${this.f.scope === 'org' ? '' : ' ' + this.f.scope_id}`, [
        {label: 'Key', cell: (e) => h('code', null, e.key)},
        {label: 'Value', cell: (e) => h('pre', {class: 'wrap state-value'}, JSON.stringify(e.value ?? null, null, 2))},
        {label: 'Revision', cls: 'num', cell: (e) => String(num(e.revision))},
        {label: 'Persisted', cell: (e) => e.persisted ? 'yes' : 'no (hot only)'},
        {label: 'Expires', cell: (e) => when(e.expires_at)},
        {label: 'Written by', cell: (e) => provenance(e.provenance)},
        {label: 'Updated', cell: (e) => when(e.updated_at)},
      ], entries, (e) => ({'data-key': e.key})) : h('p', {class: 'muted'}, 'No keys in this scope.'));
      replace(this.more, resp.next_page_token ? h('button', {type: 'button', class: 'secondary', onclick: () => this.load(resp.next_page_token)}, 'Next keys') : '');
      say(this.say, '');
    } catch (err) {
      replace(this.list);
      say(this.say, 'Could not list working state: ' + err.message, true);
    }
  }
}

export async function memoryPage(main) {
  const threads = new Threads(), memories = new Memories(), state = new WorkingState();
  replace(main, h('h1', null, 'Memory'),
    h('p', {class: 'muted'}, 'What the org\'s agents keep between steps and tasks (docs/memory.md). Readers see it all; operators delete threads; admins delete memories.'),
    threads.el, memories.el, state.el);
  await Promise.all([threads.load(), memories.load(), state.load()]);
}
