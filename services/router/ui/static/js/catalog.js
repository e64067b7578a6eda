// catalog.js: agents (and each agent's versions), skills, and the agent
// proposals waiting for a person.

import {h, replace, section, dl, chips, table, when, announce, agentHref, taskLink, enumName, num} from './dom.js';
import {get, post, query} from './api.js';
import {session} from './session.js';

const enc = encodeURIComponent;

function failed(main, title, err) {
  replace(main, h('h1', null, title), h('p', {class: 'error', role: 'alert'}, err.message));
}

export async function agentsPage(main) {
  let agents;
  try { ({agents = []} = await get('/v1/agents' + query({page_size: 1000}))); } catch (err) { return failed(main, 'Agents', err); }
  replace(main, h('h1', null, 'Agents'),
    table(`${agents.length} agents (the org's own and the shared ones)`, [
      {label: 'Name', cell: (a) => h('a', {href: agentHref(a.name)}, a.name)},
      {label: 'Description', cell: (a) => a.description || ''},
      {label: 'Model', cell: (a) => (a.model && a.model.model) || h('span', {class: 'muted'}, 'default')},
      {label: 'Skills', cell: (a) => chips(a.skills)},
      {label: 'Tools', cell: (a) => chips(a.tools)},
      {label: 'Max at once', cls: 'num', cell: (a) => a.max_concurrency ? String(a.max_concurrency) : '∞'},
      {label: 'Version', cls: 'num', cell: (a) => String(num(a.version))},
      {label: 'Owner', cell: (a) => a.org || 'shared'},
      {label: 'Updated', cell: (a) => when(a.updated_at)},
    ], agents));
}

// what changed from one version of an agent to the next.
function changes(prev, cur) {
  if (!prev) return 'created';
  const keys = ['description', 'model', 'system_prompt', 'tools', 'skills', 'max_concurrency', 'max_steps', 'budget', 'mcp_servers', 'tool_policies',
    'approval_timeout', 'retry_policy', 'queue_timeout', 'routing_priority'];
  const out = keys.filter((k) => JSON.stringify(prev[k] ?? null) !== JSON.stringify(cur[k] ?? null));
  return out.length ? out.join(', ') : 'no field changed';
}

export async function agentPage(main, name) {
  let agent, versions;
  try {
    ({agent} = await get('/v1/agents/' + enc(name)));
    ({versions = []} = await get(`/v1/agents/${enc(name)}/versions` + query({page_size: 100})));
  } catch (err) {
    return replace(main, h('h1', null, 'Agent ' + name), h('p', {class: err.status === 404 ? 'muted' : 'error', role: 'alert'},
      err.status === 404 ? 'No such agent in your org or the shared catalogue.' : err.message));
  }
  const older = [...versions].reverse(); // oldest first, to compare
  const rows = versions.map((v) => ({v, what: changes(older[older.indexOf(v) - 1], v)}));
  const m = agent.model || {};
  replace(main, h('p', {class: 'crumbs'}, h('a', {href: '/ui/agents'}, 'Agents'), ' / ', agent.name),
    h('h1', null, agent.name),
    h('div', {class: 'two-col'},
      section('Definition', dl([['Description', agent.description], ['Owner', agent.org || 'shared'], ['Version', String(num(agent.version))],
        ['Model', [m.model || 'default', m.base_url ? ' at ' + m.base_url : '', m.tool_protocol ? ' (' + m.tool_protocol + ')' : '']],
        ['Skills', chips(agent.skills)], ['Tools', chips(agent.tools)],
        ['MCP servers', (agent.mcp_servers || []).map((s) => h('div', null, h('code', null, s.name), ' ', s.url || (s.command || []).join(' ')))],
        ['Tool policies', Object.entries(agent.tool_policies || {}).map(([t, p]) => h('div', null, h('code', null, t), ' ', enumName(p, 'TOOL_POLICY_')))],
        ['Max at once', agent.max_concurrency ? String(agent.max_concurrency) : 'no limit'], ['Max steps', agent.max_steps ? String(agent.max_steps) : 'default'],
        ['Created', when(agent.created_at)], ['Updated', when(agent.updated_at)]]),
      h('h3', null, 'System prompt'), h('pre', {class: 'wrap'}, agent.system_prompt || '')),
      section('Versions', table('Versions, newest first', [
        {label: 'Version', cls: 'num', cell: (r) => String(num(r.v.version))},
        {label: 'Saved', cell: (r) => when(r.v.updated_at)},
        {label: 'Changed', cell: (r) => r.what},
      ], rows)),
      section('Tasks', h('p', null, h('a', {href: '/ui/tasks' + query({agent: agent.name})}, 'This agent\'s tasks →')))));
}

export async function skillsPage(main) {
  let skills;
  try { ({skills = []} = await get('/v1/skills' + query({page_size: 1000}))); } catch (err) { return failed(main, 'Skills', err); }
  replace(main, h('h1', null, 'Skills'),
    table(`${skills.length} skills`, [
      {label: 'Name', cell: (s) => h('code', null, s.name)},
      {label: 'Description', cell: (s) => s.description || ''},
      {label: 'Needs tools', cell: (s) => chips(s.required_tools)},
      {label: 'Prompt template', cell: (s) => s.prompt_template ? h('details', null, h('summary', null, `${s.prompt_template.length} characters`), h('pre', {class: 'wrap'}, s.prompt_template)) : ''},
      {label: 'Version', cls: 'num', cell: (s) => String(num(s.version))},
      {label: 'Owner', cell: (s) => s.org || 'shared'},
      {label: 'Updated', cell: (s) => when(s.updated_at)},
    ], skills));
}

const proposalStatuses = ['pending', 'approved', 'approved_permanent', 'rejected'];

export async function proposalsPage(main) {
  const st = new URLSearchParams(location.search).get('status') || 'pending';
  const list = h('div', {class: 'proposals'});
  replace(main, h('h1', null, 'Agent proposals'),
    h('form', {method: 'get', action: '/ui/proposals', class: 'filters'},
      h('label', {for: 'p-status'}, 'Status'),
      h('select', {id: 'p-status', name: 'status'}, proposalStatuses.map((s) => h('option', {value: s, selected: s === st}, s.replace('_', ' ')))),
      h('button', {type: 'submit'}, 'Show')),
    h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'}), list);
  const load = async () => {
    try {
      const {proposals = []} = await get('/v1/proposals' + query({status: 'PROPOSAL_STATUS_' + st.toUpperCase(), page_size: 100}));
      replace(list, proposals.length ? proposals.map((p) => proposalCard(p, load)) : h('p', {class: 'muted'}, `No ${st.replace('_', ' ')} proposals.`));
    } catch (err) { announce('Could not list proposals: ' + err.message, true); }
  };
  await load();
}

function proposalCard(p, done) {
  const a = p.agent || {};
  const pending = p.status === 'PROPOSAL_STATUS_PENDING';
  const permanent = h('input', {type: 'checkbox', id: 'perm-' + p.id});
  const comment = h('textarea', {id: 'pc-' + p.id, rows: 2, cols: 40});
  const decide = async (verb) => {
    const body = verb === 'approve' ? {permanent: permanent.checked, comment: comment.value} : {reason: comment.value};
    if (verb === 'reject' && !comment.value.trim()) { announce('A rejection needs a reason (the task fails with it).', true); return; }
    try {
      await post(`/v1/proposals/${enc(p.id)}/${verb}`, body);
      announce(`${verb === 'approve' ? 'Approved' : 'Rejected'} the agent proposed for task ${p.task_id}.`);
      done();
    } catch (err) { announce(`Could not ${verb}: ${err.message}`, true); }
  };
  return h('article', {class: 'card', 'aria-label': 'Proposal ' + p.id},
    h('h3', null, 'Agent ', h('code', null, a.name || ''), ' for task ', taskLink(p.task_id)),
    dl([['Status', enumName(p.status, 'PROPOSAL_STATUS_')], ['Why', p.reason], ['Skills', chips(a.skills)], ['Tools', chips(a.tools)],
      ['Model', (a.model && a.model.model) || 'default'], ['Proposed', when(p.created_at)], ['Decided', p.decided_at ? `${when(p.decided_at)} by ${p.decided_by}` : ''],
      ['Comment', p.comment]]),
    h('details', null, h('summary', null, 'System prompt'), h('pre', {class: 'wrap'}, a.system_prompt || '')),
    pending && session.may('approver') ? h('div', {class: 'decide'},
      h('label', {for: 'pc-' + p.id}, 'Comment (the reason, to reject)'), comment,
      h('label', {for: 'perm-' + p.id, class: 'check'}, permanent, ' save to the catalogue'),
      h('button', {type: 'button', class: 'approve', onclick: () => decide('approve')}, 'Approve'),
      h('button', {type: 'button', class: 'danger', onclick: () => decide('reject')}, 'Reject')) : '');
}
