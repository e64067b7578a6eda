// metrics.js: how the org's tasks fare over time, as charts — throughput,
// failures, queue depth per priority, durations, utilisation, cost per
// agent — from GetMetrics with a step (a series of buckets). The page
// reads the metrics again when the org's change stream says tasks moved
// (at most every 5 s), not on a timer.

import {h, replace, section, num, money, dur, durSeconds, announce, priorityName, debounce} from './dom.js';
import {get, query, stream} from './api.js';
import {chart} from './chart.js';

const windows = {'5m': [300, 5], '15m': [900, 15], '1h': [3600, 60], '6h': [21600, 300], '24h': [86400, 900], '7d': [604800, 3600 * 3]};

export async function metricsPage(main) {
  const q = new URLSearchParams(location.search);
  const win = windows[q.get('window')] ? q.get('window') : '1h';
  const agent = q.get('agent') || '';
  const body = h('div', {class: 'metrics'}, h('p', {class: 'muted'}, 'Loading…'));
  const live = h('span', {class: 'live', role: 'status'}, '');
  replace(main, h('div', {class: 'title-row'}, h('h1', null, 'Metrics'), live),
    h('form', {method: 'get', action: '/ui/metrics', class: 'filters'},
      h('label', {for: 'm-window'}, 'Window'),
      h('select', {id: 'm-window', name: 'window'}, Object.keys(windows).map((w) => h('option', {value: w, selected: w === win}, w))),
      h('label', {for: 'm-agent'}, 'Agent'), h('input', {id: 'm-agent', name: 'agent', value: agent, size: 14, spellcheck: 'false'}),
      h('button', {type: 'submit'}, 'Show')),
    h('p', {id: 'announce', class: 'muted', 'aria-live': 'polite'}), body);
  const load = async () => {
    const [secs, step] = windows[win];
    const end = new Date();
    const start = new Date(end.getTime() - secs * 1000);
    try {
      const m = await get('/v1/metrics' + query({start: start.toISOString(), end: end.toISOString(), step: step + 's', agent}));
      replace(body, ...draw(m));
      live.textContent = 'updated ' + end.toLocaleTimeString('en-GB', {hour12: false});
    } catch (err) { announce('Could not read the metrics: ' + err.message, true); }
  };
  await load();
  let last = Date.now();
  const later = debounce(load, 1000);
  stream('/v1/tasks:watch' + query({agent}), {
    changes: () => {
      if (Date.now() - last < 5000) return later();
      last = Date.now();
      load();
    },
  });
}

// pct is a bucket's percentile in seconds, null when nothing finished.
function pct(p, which) {
  return p && num(p.count) > 0 ? durSeconds(p[which]) : null;
}

function card(label, value) {
  return h('div', {class: 'stat'}, h('div', {class: 'stat-value'}, value), h('div', {class: 'stat-label'}, label));
}

function draw(m) {
  const o = m.overall || {};
  const series = m.series || [];
  const times = series.map((b) => Date.parse(b.start));
  const pick = (f) => series.map(f);
  const stats = h('div', {class: 'stats', role: 'group', 'aria-label': 'The window in numbers'},
    card('completed', num(o.completed).toLocaleString('en')), card('failed', num(o.failed).toLocaleString('en')),
    card('failure rate', (num(o.failure_rate) * 100).toFixed(1) + '%'), card('per minute', num(o.throughput_per_minute).toFixed(2)),
    card('run time p50', dur(durSeconds((o.run_time || {}).p50))), card('run time p90', dur(durSeconds((o.run_time || {}).p90))),
    card('running now', String(num(o.running))), card('queued now', String(num(o.queued))), card('backlog', String(num(o.backlog))),
    card('cost', money((o.usage || {}).cost_usd)));
  const prios = ['PRIORITY_CRITICAL', 'PRIORITY_HIGH', 'PRIORITY_NORMAL', 'PRIORITY_LOW', 'PRIORITY_BACKLOG']
    .filter((p) => series.some((b) => (b.queued || []).some((q) => q.priority === p)));
  const queued = prios.map((p) => ({name: priorityName(p), values: pick((b) => num(((b.queued || []).find((q) => q.priority === p) || {}).average))}));
  const agents = m.agents || [];
  const charts = [
    chart({title: 'Tasks finished per bucket', kind: 'bars', times, series: [
      {name: 'completed', values: pick((b) => num(b.completed)), color: '#047857'},
      {name: 'failed', values: pick((b) => num(b.failed)), color: '#b91c1c'},
      {name: 'cancelled', values: pick((b) => num(b.cancelled)), color: '#6b7280'}]}),
    chart({title: 'Failure rate', times, unit: '%', series: [
      {name: 'failed / finished', values: pick((b) => { const d = num(b.completed) + num(b.failed) + num(b.cancelled); return d ? (100 * num(b.failed)) / d : null; }), color: '#b91c1c'}]}),
    chart({title: 'Queue depth by priority (average queued)', times, series: queued.length ? queued : [{name: 'queued', values: pick(() => 0)}]}),
    chart({title: 'Durations p50 / p90', times, unit: 's', series: [
      {name: 'run time p50', values: pick((b) => pct(b.run_time, 'p50'))},
      {name: 'run time p90', values: pick((b) => pct(b.run_time, 'p90'))},
      {name: 'queue wait p50', values: pick((b) => pct(b.queue_wait, 'p50'))},
      {name: 'queue wait p90', values: pick((b) => pct(b.queue_wait, 'p90'))}]}),
    chart({title: 'Running on average, per agent', times, series: agents.length ? agents.map((a) => ({name: a.agent, values: (a.series || []).map((b) => num(b.average_running))}))
      : [{name: 'all', values: pick((b) => num(b.average_running))}]}),
    chart({title: 'Cost per agent (USD per bucket)', kind: 'bars', times, unit: '$',
      series: agents.length ? agents.map((a) => ({name: a.agent, values: (a.series || []).map((b) => num((b.usage || {}).cost_usd))}))
        : [{name: m.org || 'org', values: pick((b) => num((b.usage || {}).cost_usd))}]}),
  ];
  const util = agents.filter((a) => a.max_concurrency > 0);
  if (util.length) {
    charts.push(chart({title: 'Utilisation of max_concurrency', times, unit: '%',
      series: util.map((a) => ({name: a.agent, values: (a.series || []).map((b) => 100 * num(b.utilization))}))}));
  }
  const deleg = (m.delegations || []).length ? section('Delegations in the window', h('ul', null, m.delegations.map((d) =>
    h('li', null, `${d.parent_agent} → ${d.child_agent}: ${num(d.submitted)} sub-tasks, ${(num(d.success_rate) * 100).toFixed(0)}% succeeded`)))) : '';
  return [stats, h('div', {class: 'charts'}, charts), deleg, h('p', {class: 'muted small'},
    `Org ${m.org}, ${new Date(m.start).toLocaleString('en-GB', {hour12: false})} to ${new Date(m.end).toLocaleString('en-GB', {hour12: false})}. ` +
    'Queue depth is reconstructed from each task\'s last wait; cost counts the tasks that finished in each bucket.')];
}

