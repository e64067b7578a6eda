// task.js: one task. Its events stream in from WatchTask
// (/v1/tasks/{id}/events: the history from the cursor, then live, each
// once and in order) and are drawn as a timeline of status changes, model
// turns, tool calls and results, sub-tasks and approvals; the model's
// output as it streams when asked. Beside it: what the task is, its usage
// and cost, how its agent was chosen, its tree of sub-tasks and its
// dependency graph, and the actions the signed-in role may take.

import {h, replace, section, dl, chips, statusBadge, statusName, priorityName, taskLink, money, num, tokens, when, durSeconds, dur, pretty, terminal, debounce, enumName, agentHref, table} from './dom.js';
import {get, post, query, stream} from './api.js';
import {session} from './session.js';
import {tree, dag} from './graph.js';

const enc = encodeURIComponent;

export async function taskPage(main, id) {
  let task;
  try {
    if (session.status === 404) throw Object.assign(new Error('not found'), {status: 404});
    ({task} = await get('/v1/tasks/' + enc(id)));
  } catch (err) {
    const nf = err.status === 404 || err.status === 400;
    replace(main, h('h1', null, nf ? 'Task not found' : 'Task unavailable'),
      h('p', {class: nf ? 'muted' : 'error', role: 'alert'}, nf ? `There is no task ${id} in your org.` : err.message),
      h('p', null, h('a', {href: '/ui/tasks'}, '← All tasks')));
    return;
  }
  new TaskView(main, task).start();
}

class TaskView {
  constructor(main, task) {
    this.main = main;
    this.task = task;
    this.id = task.id;
    this.last = 0; // the cursor: seq of the last event drawn
    this.es = null;
    this.tokens = false;
    this.refresh = debounce(() => this.reload(), 250);
    this.refreshTree = debounce(() => this.drawTree(), 500);
  }

  start() {
    this.statusEl = h('span', {id: 'task-status'});
    this.actions = h('div', {class: 'actions'});
    this.note = h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'});
    this.side = h('div', {class: 'side'});
    this.timeline = h('ol', {class: 'timeline', 'aria-label': 'Events of the task'});
    this.live = h('span', {class: 'live', role: 'status'}, 'connecting…');
    this.cursorEl = h('span', {class: 'mono'}, '0');
    this.output = h('pre', {class: 'stream-out', hidden: true, 'aria-label': 'Model output as it streams'});
    this.usageEl = h('div');
    this.approvalEl = h('div');
    this.treeEl = h('div', {class: 'graph-box'}, h('p', {class: 'muted'}, 'Loading…'));
    this.depsEl = h('div', {class: 'graph-box'});
    const t = this.task;
    replace(this.main,
      h('p', {class: 'crumbs'}, h('a', {href: '/ui/tasks'}, 'Tasks'), ' / ', h('span', {class: 'mono'}, t.id)),
      h('div', {class: 'title-row'}, h('h1', null, t.title || 'Task ' + t.id), this.statusEl, this.actions),
      this.note,
      h('div', {class: 'task-grid'},
        h('div', {class: 'main-col'}, this.approvalEl, this.stepsPanel()),
        this.side));
    this.draw();
    this.drawTree();
    this.drawDeps();
    this.follow(0);
  }

  // draw renders everything that comes from the task itself.
  draw() {
    const t = this.task;
    replace(this.statusEl, statusBadge(t.status));
    this.drawActions();
    this.drawApproval();
    replace(this.side,
      section('Task', dl([
        ['Id', h('span', {class: 'mono'}, t.id)],
        ['Agent', t.agent ? h('a', {href: agentHref(t.agent)}, t.agent) : ''],
        ['Priority', priorityName(t.priority)],
        ['Tags', chips(t.tags)],
        ['Created', when(t.created_at) + (t.created_by ? ' by ' + t.created_by : '')],
        ['Started', when(t.started_at)],
        ['Finished', when(t.finished_at)],
        ['Queue wait', t.queue_wait ? dur(durSeconds(t.queue_wait)) : ''],
        ['Run time', t.run_time ? dur(durSeconds(t.run_time)) : ''],
        ['Attempt', t.attempt ? String(t.attempt) + (t.retry_count ? ` (${t.retry_count} retried)` : '') : ''],
        ['Node', t.node],
        ['Isolation', t.isolation],
        ['Parent', t.parent_task_id ? taskLink(t.parent_task_id) : ''],
        ['Root', t.root_task_id && t.root_task_id !== t.id ? taskLink(t.root_task_id) : ''],
        ['Depends on', (t.depends_on || []).map((p) => [taskLink(p), ' '])],
        ['Waiting on', (t.waiting_on || []).map((p) => [taskLink(p), ' '])],
        ['Continues', t.continue_from ? taskLink(t.continue_from) : ''],
      ]),
      h('h3', null, 'Input'), h('pre', {class: 'wrap input'}, t.input || ''),
      t.result ? [h('h3', null, 'Result'), h('pre', {class: 'wrap result'}, t.result)] : '',
      t.error ? [h('h3', null, 'Error'), h('pre', {class: 'wrap error-text'}, `${enumName(t.failure_kind, 'FAILURE_KIND_')}: ${t.error}`)] : ''),
      section('Usage and cost', this.usageEl),
      this.routingPanel(),
      section('Sub-tasks', this.treeEl),
      section('Dependencies', this.depsEl));
    this.drawUsage();
  }

  drawUsage() {
    const t = this.task, own = t.usage || {}, sub = t.subtree_usage || {};
    const total = {prompt_tokens: num(own.prompt_tokens) + num(sub.prompt_tokens), completion_tokens: num(own.completion_tokens) + num(sub.completion_tokens),
      total_tokens: num(own.total_tokens) + num(sub.total_tokens), cost_usd: num(own.cost_usd) + num(sub.cost_usd)};
    replace(this.usageEl, table('Tokens and cost of the task and its sub-tasks', [
      {label: '', cell: (r) => r[0]},
      {label: 'Prompt', cls: 'num', cell: (r) => num(r[1].prompt_tokens).toLocaleString('en')},
      {label: 'Completion', cls: 'num', cell: (r) => num(r[1].completion_tokens).toLocaleString('en')},
      {label: 'Tokens', cls: 'num', cell: (r) => tokens(r[1])},
      {label: 'Cost', cls: 'num', cell: (r) => money(r[1].cost_usd)},
    ], [['Own', own], ['Sub-tasks', sub], ['Total', total]]));
  }

  drawActions() {
    const t = this.task, out = [];
    if (session.may('operator') && !terminal.has(t.status)) {
      out.push(h('button', {type: 'button', class: 'danger', onclick: () => this.cancel()}, 'Cancel task'));
    }
    if (session.may('operator') && terminal.has(t.status)) {
      out.push(h('button', {type: 'button', onclick: () => this.retry()}, 'Retry'));
    }
    replace(this.actions, out);
  }

  async cancel() {
    if (!window.confirm('Cancel task ' + this.id + '?')) return;
    try {
      const {task} = await post(`/v1/tasks/${enc(this.id)}/cancel`, {reason: 'cancelled from the dashboard by ' + session.key});
      this.task = task;
      this.draw();
    } catch (err) { this.say('Cancel refused: ' + err.message, true); }
  }

  // retry submits the same task again (same input, agent, priority, tags,
  // budget and policies); the new task names this one in its metadata.
  async retry() {
    const t = this.task;
    const req = {title: t.title, input: t.input, agent: t.agent, priority: t.priority, tags: t.tags,
      metadata: {...(t.metadata || {}), retry_of: t.id}, budget: t.budget, retry_policy: t.retry_policy, queue_timeout: t.queue_timeout};
    try {
      const {task} = await post('/v1/tasks', req);
      location.assign('/ui/tasks/' + enc(task.id));
    } catch (err) { this.say('Retry refused: ' + err.message, true); }
  }

  say(text, isError) {
    this.note.className = isError ? 'error' : 'muted';
    this.note.textContent = text;
  }

  drawApproval() {
    const a = this.task.pending_approval;
    if (!a || this.task.status !== 'TASK_STATUS_BLOCKED') { replace(this.approvalEl); return; }
    replace(this.approvalEl, approvalCard(a, () => this.reload(), (m, e) => this.say(m, e)));
  }

  routingPanel() {
    const r = this.task.routing;
    if (!r) return section('Routing', h('p', {class: 'muted'}, 'No routing recorded.'));
    const w = r.weights || {};
    const a = r.analysis;
    return section('Routing',
      dl([['Method', r.method], ['Chosen', r.chosen], ['Skills asked', chips(r.required_skills)],
        ['Analysis', a ? `${a.method}: ${(a.skills || []).join(', ') || 'no skill matched'}${a.model_error ? ' (model: ' + a.model_error + ')' : ''}` : ''],
        ['Weights', r.weights ? `capability ${num(w.capability)}, workload ${num(w.workload)}, priority ${num(w.priority)}, affinity ${num(w.affinity)}` : ''],
        ['Decided', when(r.decided_at)]]),
      (r.candidates || []).length ? table('Candidates, best first', [
        {label: 'Agent', cell: (c) => c.agent + (c.agent_org ? '' : ' (shared)')},
        {label: 'Score', cls: 'num', cell: (c) => num(c.score).toFixed(3)},
        {label: 'Capability', cls: 'num', cell: (c) => num(c.capability).toFixed(2)},
        {label: 'Workload', cls: 'num', cell: (c) => num(c.workload).toFixed(2)},
        {label: 'Priority', cls: 'num', cell: (c) => num(c.priority).toFixed(2)},
        {label: 'Affinity', cls: 'num', cell: (c) => num(c.affinity).toFixed(2)},
        {label: 'Missing', cell: (c) => (c.missing_skills || []).join(', ')},
      ], r.candidates) : '');
  }

  async drawTree() {
    const root = this.task.root_task_id || this.id;
    try {
      const {tasks = []} = await get('/v1/tasks' + query({root_task_id: root, page_size: 200}));
      if (tasks.length <= 1) { replace(this.treeEl, h('p', {class: 'muted'}, 'No sub-tasks.')); return; }
      replace(this.treeEl, tree(tasks, root, this.id) || h('p', {class: 'muted'}, 'The tree\'s root is not visible.'));
    } catch (err) { replace(this.treeEl, h('p', {class: 'error'}, err.message)); }
  }

  // drawDeps draws the task and its ancestors by depends_on (up to 30).
  async drawDeps() {
    if (!(this.task.depends_on || []).length) { replace(this.depsEl, h('p', {class: 'muted'}, 'No dependencies.')); return; }
    const got = new Map([[this.id, this.task]]);
    const todo = [...this.task.depends_on];
    while (todo.length && got.size < 30) {
      const pid = todo.shift();
      if (got.has(pid)) continue;
      try {
        const {task} = await get('/v1/tasks/' + enc(pid));
        got.set(pid, task);
        todo.push(...(task.depends_on || []));
      } catch { got.set(pid, {id: pid, title: '(not visible)', status: 'TASK_STATUS_UNSPECIFIED'}); }
    }
    replace(this.depsEl, dag([...got.values()], this.id));
  }

  async reload() {
    try {
      ({task: this.task} = await get('/v1/tasks/' + enc(this.id)));
      this.draw();
    } catch (err) { this.say(err.message, true); }
  }

  stepsPanel() {
    const tokensBox = h('input', {type: 'checkbox', id: 'show-tokens', onchange: (e) => {
      this.tokens = e.target.checked;
      this.output.hidden = !this.tokens;
      this.follow(this.last);
    }});
    const from = h('input', {type: 'number', id: 'replay-from', min: 0, value: 0, size: 6});
    return section('Steps',
      h('div', {class: 'steps-bar'},
        this.live,
        h('span', null, 'cursor ', this.cursorEl),
        h('label', {for: 'show-tokens', class: 'check'}, tokensBox, ' Show model output as it streams'),
        h('form', {class: 'inline', onsubmit: (e) => {
          e.preventDefault();
          this.timeline.replaceChildren();
          this.last = num(from.value);
          this.follow(this.last);
        }}, h('label', {for: 'replay-from'}, 'Replay from seq'), from, h('button', {type: 'submit', class: 'secondary'}, 'Replay'))),
      this.output, this.timeline);
  }

  // follow (re)opens the task's event stream after seq.
  follow(after) {
    if (this.es) this.es.close();
    const on = (resp) => this.event(resp);
    this.es = stream(`/v1/tasks/${enc(this.id)}/events` + query({after: after || '', tokens: this.tokens ? 'true' : ''}), {
      created: on, status: on, step: on, dependency: on, updated: on, subtask: on, proposal: on,
      token: (resp) => { this.output.append(resp.event.token || ''); this.output.scrollTop = this.output.scrollHeight; },
      end: () => { this.es.close(); this.live.textContent = 'ended'; this.live.className = 'live is-closed'; },
      error: (st) => { if (st && st.message) this.say('The stream ended: ' + st.message, true); },
    }, (state) => {
      if (this.live.textContent === 'ended') return;
      this.live.textContent = state === 'live' ? '● live' : state === 'reconnecting' ? 'reconnecting…' : 'closed';
      this.live.className = 'live is-' + state;
    });
  }

  event(resp) {
    const ev = resp.event || {};
    const seq = num(ev.seq);
    if (seq <= this.last) return;
    this.last = seq;
    this.cursorEl.textContent = String(seq);
    this.timeline.append(eventItem(ev));
    if (resp.status && resp.status !== this.task.status) {
      this.task.status = resp.status;
      replace(this.statusEl, statusBadge(resp.status));
    }
    const u = ev.step && ev.step.usage;
    if (u) {
      const own = this.task.usage = {...(this.task.usage || {})};
      for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens', 'cost_usd']) own[k] = num(own[k]) + num(u[k]);
      this.drawUsage();
    }
    if (ev.type === 'EVENT_TYPE_STEP' && ev.step.kind === 'STEP_KIND_MODEL_TURN') this.output.replaceChildren();
    if (ev.type === 'EVENT_TYPE_STATUS' || ev.type === 'EVENT_TYPE_UPDATED' || ev.type === 'EVENT_TYPE_PROPOSAL') this.refresh();
    if (ev.type === 'EVENT_TYPE_SUBTASK') this.refreshTree();
  }
}

function stamp(ev) {
  return h('time', {datetime: ev.time || ''}, ev.time ? new Date(ev.time).toLocaleTimeString('en-GB', {hour12: false}) : '');
}

// eventItem draws one event of the history.
function eventItem(ev) {
  const li = h('li', {class: 'ev ev-' + enumName(ev.type, 'EVENT_TYPE_'), 'data-seq': String(num(ev.seq))},
    h('span', {class: 'seq mono', title: 'seq'}, '#' + num(ev.seq)), stamp(ev));
  switch (ev.type) {
    case 'EVENT_TYPE_CREATED':
      li.append(h('strong', null, 'created'));
      break;
    case 'EVENT_TYPE_STATUS':
      li.append(h('span', null, statusName(ev.from_status), ' → '), statusBadge(ev.status),
        ev.attempt ? h('span', {class: 'muted'}, ` attempt ${ev.attempt}`) : '', ev.node ? h('span', {class: 'muted'}, ` on ${ev.node}`) : '',
        ev.reason ? h('p', {class: 'reason wrap'}, ev.reason) : '',
        ev.approval ? approvalSummary(ev.approval) : '');
      break;
    case 'EVENT_TYPE_STEP':
      li.append(stepBody(ev.step || {}));
      break;
    case 'EVENT_TYPE_SUBTASK': {
      const st = ev.subtask || {};
      li.append(h('strong', null, 'sub-task '), taskLink(st.task_id), ' ', statusBadge(st.status), ` ${st.agent || ''} `,
        st.title ? h('span', null, '“', st.title, '”') : '', st.error ? h('p', {class: 'reason wrap'}, st.error) : '');
      break;
    }
    case 'EVENT_TYPE_DEPENDENCY': {
      const d = ev.dependency || {};
      li.append(h('strong', null, 'parent finished '), taskLink(d.task_id), ' ', statusBadge(d.status));
      break;
    }
    case 'EVENT_TYPE_UPDATED':
      li.append(h('strong', null, 'updated: '), ((ev.update || {}).mask || []).join(', '));
      break;
    case 'EVENT_TYPE_PROPOSAL': {
      const p = ev.proposal || {};
      li.append(h('strong', null, 'agent proposal '), enumName(p.status, 'PROPOSAL_STATUS_'), ' ', (p.agent || {}).name || '',
        ' ', h('a', {href: '/ui/proposals'}, 'proposals'));
      break;
    }
    default:
      li.append(enumName(ev.type, 'EVENT_TYPE_'));
  }
  return li;
}

function stepBody(st) {
  const u = st.usage;
  const secs = durSeconds(st.duration);
  const meta = [st.model, secs > 0 ? dur(secs) : '', u ? `${num(u.prompt_tokens)}+${num(u.completion_tokens)} tokens` : '',
    u && num(u.cost_usd) ? money(u.cost_usd) : '', st.attempt > 1 ? 'attempt ' + st.attempt : ''].filter(Boolean).join(' · ');
  switch (st.kind) {
    case 'STEP_KIND_MODEL_TURN':
      return h('div', {class: 'step model'}, h('strong', null, 'model turn'), h('span', {class: 'muted'}, ' ' + meta),
        st.content ? h('pre', {class: 'wrap'}, st.content) : '',
        (st.tool_calls || []).length ? h('ul', {class: 'calls'}, st.tool_calls.map((c) => h('li', null, h('code', null, c.name), ' ', h('code', {class: 'args'}, c.arguments || '')))) : '');
    case 'STEP_KIND_TOOL_CALL':
      return h('div', {class: 'step call'}, h('strong', null, 'tool call '), h('code', null, st.tool_name || ''), ' ',
        h('span', {class: 'badge dec-' + enumName(st.decision, 'TOOL_DECISION_')}, enumName(st.decision, 'TOOL_DECISION_')),
        st.risk ? h('span', {class: 'muted'}, ' risk ' + st.risk) : '',
        h('pre', {class: 'wrap args'}, pretty(st.arguments)));
    case 'STEP_KIND_TOOL_RESULT':
      return h('div', {class: 'step result' + (st.is_error ? ' is-error' : '')}, h('strong', null, st.is_error ? 'tool error ' : 'tool result '),
        h('code', null, st.tool_name || ''), h('span', {class: 'muted'}, ` ${num(st.result_bytes)} bytes${st.truncated ? ' (truncated)' : ''}${secs > 0 ? ' · ' + dur(secs) : ''}`),
        h('pre', {class: 'wrap'}, st.content || ''));
  }
  return h('div', {class: 'step'}, enumName(st.kind, 'STEP_KIND_'));
}

function approvalSummary(a) {
  return h('div', {class: 'approval-sum'}, h('strong', null, 'approval '), enumName(a.status, 'APPROVAL_STATUS_'), ' ', h('code', null, a.tool || ''),
    a.risk ? ' risk ' + a.risk : '', a.decided_by ? ` by ${a.decided_by}` : '', a.comment ? h('p', {class: 'reason wrap'}, a.comment) : '');
}

// approvalCard shows a pending approval with its exact arguments and, for
// an approver, the decision buttons. done runs after a decision.
export function approvalCard(a, done, say) {
  const comment = h('textarea', {id: 'comment-' + a.id, rows: 2, cols: 40});
  const decide = async (verb) => {
    try {
      await post(`/v1/approvals/${enc(a.id)}/${verb}`, {comment: comment.value});
      say(`${verb === 'approve' ? 'Approved' : 'Rejected'} ${a.tool} for task ${a.task_id}.`);
      done();
    } catch (err) { say(`Could not ${verb}: ${err.message}`, true); }
  };
  return h('article', {class: 'approval card', 'aria-label': 'Pending approval ' + a.id, 'data-approval': a.id},
    h('h3', null, 'Approval needed: ', h('code', null, a.tool || '')),
    dl([['Task', taskLink(a.task_id)], ['Agent', a.agent], ['Risk', a.risk], ['Reason', a.reason], ['Asked', when(a.created_at)], ['Deadline', when(a.deadline)], ['Id', h('span', {class: 'mono'}, a.id)]]),
    h('h4', null, 'Exact arguments'), h('pre', {class: 'wrap args exact'}, a.arguments || ''),
    a.arguments_sha256 ? h('p', {class: 'muted small mono'}, 'sha256 ' + a.arguments_sha256) : '',
    session.may('approver') ? h('div', {class: 'decide'},
      h('label', {for: 'comment-' + a.id}, 'Comment'), comment,
      h('button', {type: 'button', class: 'approve', onclick: () => decide('approve')}, 'Approve'),
      h('button', {type: 'button', class: 'danger', onclick: () => decide('reject')}, 'Reject'))
      : h('p', {class: 'muted'}, 'Deciding needs the approver (or admin) role.'));
}
