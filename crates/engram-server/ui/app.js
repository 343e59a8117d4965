// The engram inspector: what the agent remembers about someone, where each memory came from,
// and a way to correct it. Everything it shows comes from the public REST API; the state of
// the page is its URL (`/ui/?user=alice&q=lisbon` is alice's search for "lisbon").

import { ApiError, api, signIn, signOut, token } from './api.js';
import { count, h, replace } from './dom.js';
import * as graph from './views/graph.js';
import * as memory from './views/memory.js';
import * as profile from './views/profile.js';
import * as search from './views/search.js';
import * as sessions from './views/sessions.js';
import * as timeline from './views/timeline.js';
import * as transfer from './views/transfer.js';

/** The views, in the order of the navigation. `memory` is reached from the others. */
const VIEWS = {
  profile: { label: 'Profile', module: profile },
  search: { label: 'Search', module: search },
  timeline: { label: 'Timeline', module: timeline },
  graph: { label: 'Graph', module: graph },
  sessions: { label: 'Sessions', module: sessions },
  transfer: { label: 'Import & export', module: transfer },
  memory: { label: 'Memory', module: memory, hidden: true },
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const live = document.getElementById('status');

/** Who the API says we are: the users we may see, and whether a token is in use. */
let identity = null;
/** Bumped on every render, so an answer to an older render is dropped. */
let generation = 0;

function params() {
  return new URLSearchParams(location.search);
}

/** The view the URL asks for: `view`, else search when there is a query, else the profile. */
function currentView(p) {
  const view = p.get('view');
  if (view && VIEWS[view]) return view;
  return p.get('q') ? 'search' : 'profile';
}

/** A URL of this page for these parameters (empty values left out). */
function href(values) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) {
    if (value === undefined || value === null || value === '' || value === false) continue;
    query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `?${text}` : location.pathname;
}

/** Goes to a state of the page (a new history entry unless `replace`). */
function go(values, { replace: replaceEntry = false } = {}) {
  const url = href(values);
  if (replaceEntry) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
}

/** A link to a state of the page that navigates without reloading. */
function link(values, ...children) {
  return h(
    'a',
    {
      href: href(values),
      onclick: (event) => {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        go(values);
      },
    },
    ...children,
  );
}

/** Says something to screen readers and shows it briefly. */
function status(message) {
  live.textContent = message;
  live.hidden = false;
  clearTimeout(status.timer);
  status.timer = setTimeout(() => {
    live.hidden = true;
  }, 6000);
}

/** Asks before something that cannot be undone; resolves to true when confirmed. */
function confirmAction(question, action) {
  const dialog = document.getElementById('confirm');
  replace(dialog.querySelector('.question'), question);
  const ok = dialog.querySelector('.ok');
  ok.textContent = action;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}

function errorBox(error) {
  return h('div', { class: 'error', role: 'alert' }, h('strong', {}, 'Error: '), error.message || String(error));
}

function signInForm(message) {
  const input = h('input', {
    id: 'token',
    type: 'password',
    name: 'token',
    autocomplete: 'off',
    required: true,
    spellcheck: false,
  });
  const form = h(
    'form',
    {
      class: 'signin card',
      onsubmit: (event) => {
        event.preventDefault();
        signIn(input.value);
        identity = null;
        render();
      },
    },
    h('h2', {}, 'Sign in'),
    message ? h('p', { class: 'error', role: 'alert' }, message) : null,
    h(
      'p',
      {},
      'This server needs an engram token. Make one with ',
      h('code', {}, 'engram token create --user NAME'),
      '. It stays in this tab only.',
    ),
    h('label', { for: 'token' }, 'Token'),
    input,
    h('button', { type: 'submit' }, 'Sign in'),
  );
  replace(nav);
  replace(who);
  replace(main, form);
  main.dataset.ready = 'signin';
  input.focus();
}

function header(p, view) {
  const user = p.get('user');
  const select = h(
    'select',
    {
      id: 'user',
      onchange: () => go({ user: select.value, view: view === 'memory' ? 'profile' : view }),
    },
    user ? null : h('option', { value: '' }, 'Choose a user'),
    identity.users.map((u) =>
      h('option', { value: u.user_id, selected: u.user_id === user }, `${u.user_id} (${count(u.memories)})`),
    ),
  );
  if (user && !identity.users.some((u) => u.user_id === user)) {
    select.prepend(h('option', { value: user, selected: true }, user));
  }
  replace(
    who,
    h('label', { for: 'user' }, 'User'),
    select,
    token()
      ? h(
          'button',
          {
            type: 'button',
            class: 'quiet',
            onclick: () => {
              signOut();
              identity = null;
              history.pushState(null, '', location.pathname);
              render();
            },
          },
          'Sign out',
        )
      : null,
  );
  replace(
    nav,
    user
      ? Object.entries(VIEWS)
          .filter(([, v]) => !v.hidden)
          .map(([name, v]) => {
            const a = link({ user, view: name }, v.label);
            if (name === view) a.setAttribute('aria-current', 'page');
            return a;
          })
      : null,
  );
}

function chooseUser() {
  replace(
    main,
    h('h2', {}, 'Whose memory?'),
    identity.users.length
      ? h(
          'ul',
          { class: 'users' },
          identity.users.map((u) => h('li', {}, link({ user: u.user_id }, u.user_id), ` — ${count(u.memories)} memories`)),
        )
      : h('p', {}, 'No memories yet. Add some with ', h('code', {}, 'engram add'), ' or import a file.'),
    identity.access === 'local'
      ? h(
          'form',
          {
            class: 'inline',
            onsubmit: (event) => {
              event.preventDefault();
              const name = event.target.elements.other.value.trim();
              if (name) go({ user: name });
            },
          },
          h('label', { for: 'other' }, 'Another user'),
          h('input', { id: 'other', name: 'other', required: true }),
          h('button', { type: 'submit' }, 'Open'),
        )
      : null,
  );
  main.dataset.ready = 'users';
}

async function render() {
  const mine = ++generation;
  const p = params();
  delete main.dataset.ready;
  main.setAttribute('aria-busy', 'true');
  try {
    if (!identity) {
      try {
        identity = await api.get('/v1/users');
      } catch (e) {
        if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
          main.removeAttribute('aria-busy');
          signInForm(token() ? e.message : null);
          return;
        }
        throw e;
      }
      if (mine !== generation) return;
    }
    let user = p.get('user');
    if (!user && identity.users.length === 1) {
      user = identity.users[0].user_id;
      p.set('user', user);
      history.replaceState(null, '', `?${p}`);
    }
    const view = currentView(p);
    header(p, view);
    if (!user) {
      chooseUser();
      return;
    }
    document.title = `${VIEWS[view].label} · ${user} · engram`;
    const ctx = {
      main,
      params: p,
      user,
      view,
      go,
      link,
      status,
      confirm: confirmAction,
      current: () => mine === generation,
      refresh: render,
    };
    await VIEWS[view].module.render(ctx);
    if (mine === generation) {
      main.dataset.ready = view;
      performance.mark(`engram:ready:${view}`);
    }
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof ApiError && e.status === 401) {
      signOut();
      identity = null;
      signInForm(e.message);
      return;
    }
    replace(main, errorBox(e));
    main.dataset.ready = 'error';
  } finally {
    if (mine === generation) main.removeAttribute('aria-busy');
  }
}

window.addEventListener('popstate', render);
render();
