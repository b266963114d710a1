// The console's shell: sign in with a key (kept in memory only), the
// navigation for what that key may see, and a hash router over the views.

import { Api, ApiError } from './api.js';
import { h } from './ui.js';
import { views } from './views.js';

const state = { api: null, session: null, leave: null, clusterOn: false };

const signinForm = document.getElementById('signin');
const keyField = document.getElementById('api-key');
const sessionBox = document.getElementById('session');
const who = document.getElementById('who');
const nav = document.getElementById('nav');
const navList = document.getElementById('nav-list');
const searchForm = document.getElementById('search-form');
const searchField = document.getElementById('search');
const notice = document.getElementById('notice');
const view = document.getElementById('view');

/** Says something in the live region (errors as alerts). */
function say(text, isError = false) {
  notice.replaceChildren(text ? h('p', { class: isError ? 'error' : 'info', role: isError ? 'alert' : null, text }) : '');
}

/** Returns what a key is from its readable prefix (sk_live_, mk_test_, …). */
function keyShape(key) {
  const match = /^(sk|mk)_(live|test)_/.exec(key);
  if (!match) return { kind: 'secret', mode: null };
  return { kind: match[1] === 'sk' ? 'secret' : 'mobile', mode: match[2] };
}

/** The navigation entries for the signed-in key, in order. */
function entries() {
  const session = state.session;
  if (!session) return [];
  if (session.kind === 'operator') {
    return [['apps', 'Apps'], ['overview', 'Overview'], ['metrics', 'Metrics']]
      .concat(state.clusterOn ? [['cluster', 'Cluster']] : []);
  }
  return [['overview', 'Overview'], ['changes', 'Changes'], ['inactivity', 'Inactivity']];
}

async function signIn(event) {
  event.preventDefault();
  const key = keyField.value.trim();
  keyField.value = '';
  if (!key) {
    say('Type an API key first: the operator key or an app\'s secret key.', true);
    return;
  }
  const api = new Api(key);
  let session;
  try {
    await api.get('/v1/apps');
    session = { kind: 'operator', mode: null };
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 403) {
      api.forget();
      say(error instanceof ApiError ? error.describe() : String(error), true);
      return;
    }
    session = keyShape(key);
  }
  state.api = api;
  state.session = session;
  state.clusterOn = false;
  if (session.kind === 'operator') {
    try {
      await api.get('/v1/cluster');
      state.clusterOn = true;
    } catch (_) {
      // 404 without cluster mode (spec §13.9): no Cluster entry.
    }
  }
  const label = session.kind === 'operator' ? 'the operator key'
    : `a ${session.kind} key${session.mode ? ` (${session.mode} mode)` : ''}`;
  who.textContent = `Signed in with ${label}.`;
  signinForm.hidden = true;
  sessionBox.hidden = false;
  searchForm.hidden = session.kind === 'operator';
  nav.hidden = false;
  say('');
  const first = entries()[0][0];
  if (location.hash === `#/${first}`) route();
  else location.hash = `#/${first}`;
}

function signOut() {
  if (state.leave) state.leave();
  state.leave = null;
  if (state.api) state.api.forget();
  state.api = null;
  state.session = null;
  state.clusterOn = false;
  who.textContent = '';
  searchField.value = '';
  sessionBox.hidden = true;
  nav.hidden = true;
  navList.replaceChildren();
  view.replaceChildren();
  signinForm.hidden = false;
  history.replaceState(null, '', location.pathname);
  say('Signed out: the key is forgotten.');
  keyField.focus();
}

function renderNav(current) {
  navList.replaceChildren(...entries().map(([id, name]) => h('li', {},
    h('a', { href: `#/${id}`, 'aria-current': id === current ? 'page' : null, text: name }))));
}

/** Shows the view the hash names; a view returns a function that stops it. */
async function route() {
  if (state.leave) state.leave();
  state.leave = null;
  if (!state.session) {
    view.replaceChildren(h('h1', { text: 'Sign in' }),
      h('p', { text: 'Type the operator key or an app\'s secret key into the API key field above. '
        + 'The key stays in this page\'s memory only and is forgotten when you sign out or close the tab.' }));
    return;
  }
  const [name, ...rest] = location.hash.replace(/^#\//, '').split('/');
  const argument = rest.map(decodeURIComponent).join('/');
  const allowed = entries().map(([id]) => id);
  const known = allowed.includes(name) || ((name === 'device' || name === 'search') && state.session.kind !== 'operator');
  if (!known) {
    location.hash = `#/${allowed[0]}`;
    return;
  }
  renderNav(name);
  say('');
  const controller = new AbortController();
  state.leave = () => controller.abort();
  const container = h('section', { class: 'view', 'aria-labelledby': 'view-title' });
  view.replaceChildren(container);
  const context = {
    api: state.api, session: state.session, container, signal: controller.signal, argument, say,
    go: (hash) => { location.hash = hash; },
  };
  try {
    await views[name](context);
  } catch (error) {
    if (error && error.name === 'AbortError') return;
    const text = error instanceof ApiError ? error.describe() : `Something went wrong: ${error}`;
    if (!container.querySelector('h1')) container.prepend(h('h1', { id: 'view-title', text: viewTitle(name) }));
    container.append(h('p', { class: 'error', role: 'alert', text }));
  }
  const heading = container.querySelector('h1');
  if (heading && document.activeElement === document.body) heading.focus();
}

function viewTitle(name) {
  const found = entries().find(([id]) => id === name);
  return found ? found[1] : name === 'device' ? 'Device' : 'Search';
}

signinForm.addEventListener('submit', signIn);
document.getElementById('signout').addEventListener('click', signOut);
searchForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const query = searchField.value.trim();
  if (query) location.hash = `#/search/${encodeURIComponent(query)}`;
});
window.addEventListener('hashchange', route);
route();
