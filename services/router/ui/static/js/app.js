// app.js: the dashboard's entry. The server sent the page's shell (the
// header, the navigation, who is signed in); this draws the page the path
// names into <main>.

import {h, replace} from './dom.js';
import {session} from './session.js';
import {tasksPage} from './tasks.js';
import {taskPage} from './task.js';
import {approvalsPage} from './approvals.js';
import {agentsPage, agentPage, skillsPage, proposalsPage} from './catalog.js';
import {metricsPage} from './metrics.js';
import {executorsPage} from './executors.js';
import {memoryPage} from './memory.js';

async function route(main) {
  const parts = location.pathname.replace(/^\/ui\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || 'tasks';
  if (session.role === 'platform' && !session.org && ['tasks', 'approvals', 'proposals', 'metrics', 'memory'].includes(page)) {
    replace(main, h('h1', null, page[0].toUpperCase() + page.slice(1)),
      h('p', {class: 'muted'}, 'A platform key reads an org only once it chose one: name it in the header (Org, Switch). Agents, skills and executors show the shared catalogue and the nodes.'));
    return;
  }
  switch (page) {
    case 'tasks': return parts[1] ? taskPage(main, parts[1]) : tasksPage(main);
    case 'approvals': return approvalsPage(main);
    case 'agents': return parts[1] ? agentPage(main, parts[1]) : agentsPage(main);
    case 'skills': return skillsPage(main);
    case 'proposals': return proposalsPage(main);
    case 'metrics': return metricsPage(main);
    case 'memory': return memoryPage(main);
    case 'executors': return executorsPage(main);
  }
  replace(main, h('h1', null, 'Not found'));
}

const main = document.getElementById('main');
route(main).catch((err) => {
  replace(main, h('h1', null, 'Something went wrong'), h('p', {class: 'error', role: 'alert'}, String(err.message || err)));
});
