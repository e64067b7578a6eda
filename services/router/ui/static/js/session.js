// session.js: who is signed in, as the server put it in the page's shell.

import {meta} from './dom.js';

const roles = {reader: 1, operator: 2, approver: 2, admin: 3};

// session is who is signed in, as the server put it in the shell.
export const session = {
  org: meta('am-org'),
  role: meta('am-role'),
  key: meta('am-key'),
  status: Number(meta('am-status') || 200),
  // may says whether the role may do what needs role need (the API
  // decides; this only hides buttons that would be refused).
  may(need) {
    const r = this.role;
    if (r === 'admin') return need !== 'platform';
    if (r === 'platform') return need === 'platform';
    if (need === 'reader') return r in roles;
    return r === need;
  },
};

