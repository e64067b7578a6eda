// executors.js: the executor nodes as their heartbeats describe them
// (ExecutorService.ListExecutors): slots, load, draining or lost, labels,
// the warm pool, when each was last heard from. Heartbeats come every few
// seconds, so the page reads the list again at that pace; the change
// stream of the org's tasks (tasks starting and ending) reads it too.

import {h, replace, chips, when, age, dur, durSeconds, announce, debounce, taskLink} from './dom.js';
import {get, stream} from './api.js';
import {session} from './session.js';

const REFRESH_MS = 5000;

function slots(x) {
  const cap = Math.max(1, x.capacity || 0), run = x.running || 0;
  return h('div', {class: 'slots'},
    h('meter', {min: 0, max: cap, value: run, 'aria-label': `${run} of ${x.capacity || 0} slots busy`}),
    h('span', null, ` ${run} / ${x.capacity || 0} busy, ${x.free || 0} free`));
}

function state(x) {
  if (x.lost) return h('span', {class: 'badge st-failed'}, 'lost');
  if (x.draining) return h('span', {class: 'badge st-blocked'}, 'draining');
  return h('span', {class: 'badge st-completed'}, 'up');
}

export async function executorsPage(main) {
  const body = h('div', {class: 'executors'});
  replace(main, h('h1', null, 'Executors'), h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'}), body);
  const load = async () => {
    try {
      const {executors = []} = await get('/v1/executors');
      replace(body, executors.length ? h('div', {class: 'cards'}, executors.map((x) => h('article', {class: 'card node', 'aria-label': 'Executor ' + x.node},
        h('h2', null, x.node, ' ', state(x)),
        slots(x),
        h('dl', {class: 'facts'},
          h('dt', null, 'Last heartbeat'), h('dd', null, h('time', {datetime: x.last_heartbeat}, age(x.last_heartbeat) + ' ago'), ` (every ${dur(durSeconds(x.ttl) / 3)}; lost after ${dur(durSeconds(x.ttl))} of silence)`),
          h('dt', null, 'Heard since'), h('dd', null, when(x.first_seen), ` · ${Number(x.heartbeats || 0)} heartbeats`),
          h('dt', null, 'Warm pool'), h('dd', null, x.warm_pool && x.warm_pool.reported ? `${x.warm_pool.idle || 0} idle of ${x.warm_pool.target || 0}` : h('span', {class: 'muted'}, 'not reported by this executor')),
          Object.keys(x.labels || {}).length ? [h('dt', null, 'Labels'), h('dd', null, chips(Object.entries(x.labels).map(([k, v]) => `${k}=${v}`)))] : '',
          (x.running_tasks || []).length ? [h('dt', null, 'Running'), h('dd', null, x.running_tasks.map((id) => [taskLink(id), ' ']))] : ''))))
        : h('p', {class: 'muted'}, 'No executor heard from yet (they send a heartbeat every few seconds).'));
      announce(`${executors.length} nodes · updated ${new Date().toLocaleTimeString('en-GB', {hour12: false})}`);
    } catch (err) {
      replace(body, h('p', {class: err.status === 403 ? 'muted' : 'error', role: 'alert'},
        err.status === 403 ? 'The executors page needs an admin or platform key.' : err.message));
      return false;
    }
    return true;
  };
  if (!(await load())) return;
  setInterval(load, REFRESH_MS);
  if (session.org) stream('/v1/tasks:watch', {changes: debounce(load, 500)});
}
