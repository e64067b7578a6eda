// approvals.js: the org's pending tool calls, each with its exact
// arguments and risk, to approve or reject. The list follows the org's
// change stream: a task that comes to need a decision (or stops needing
// one) has the list read again.

import {h, replace, announce, debounce} from './dom.js';
import {get, query, stream} from './api.js';
import {approvalCard} from './task.js';

export async function approvalsPage(main) {
  const list = h('div', {class: 'approvals'});
  const live = h('span', {class: 'live', role: 'status'}, 'connecting…');
  replace(main, h('div', {class: 'title-row'}, h('h1', null, 'Approvals'), live),
    h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'}), list);
  const load = async () => {
    try {
      const {approvals = []} = await get('/v1/approvals' + query({page_size: 100}));
      replace(list, approvals.length ? approvals.map((a) => approvalCard(a, load, announce)) : h('p', {class: 'muted'}, 'No tool call waits for a decision.'));
    } catch (err) { announce('Could not list approvals: ' + err.message, true); }
  };
  const again = debounce(load, 300);
  stream('/v1/tasks:watch', {
    ready: load,
    reset: load,
    changes: (resp) => {
      const pending = new Set([...list.querySelectorAll('[data-approval]')].map((el) => el.dataset.approval.replace(/-a\d+$/, '')));
      if ((resp.changes || []).some((c) => c.needs_decision || (c.status && pending.has(c.task_id)))) again();
    },
  }, (state) => {
    live.textContent = state === 'live' ? '● live' : state === 'reconnecting' ? 'reconnecting…' : 'disconnected';
    live.className = 'live is-' + state;
  });
}
