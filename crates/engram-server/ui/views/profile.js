// Profile: the user's current facts and preferences, each with when it became true, what it
// replaced (and when), where it came from, and edit / invalidate / delete.

import { api, path } from '../api.js';
import { count, h, replace, when } from '../dom.js';
import { kindBadge, memoryActions, pager } from './parts.js';

const PAGE = 50;

function origin(ctx, m) {
  const session = typeof m.metadata?.session === 'string' ? m.metadata.session : m.session_id;
  const parts = [];
  if (session) {
    parts.push('from the conversation ', ctx.link({ user: ctx.user, view: 'sessions', session, at: m.created_at }, session));
  } else {
    parts.push(`added by ${m.source}`);
  }
  parts.push(' on ', when(m.created_at));
  return h('p', { class: 'origin' }, ...parts);
}

function replaced(entry) {
  if (!entry.supersedes?.length) return null;
  const n = entry.supersedes.length;
  return h(
    'details',
    { class: 'supersedes' },
    h('summary', {}, `Replaced ${n} earlier value${n === 1 ? '' : 's'}`),
    h(
      'ul',
      {},
      entry.supersedes.map((old) =>
        h(
          'li',
          {},
          h('s', {}, old.text),
          h('span', { class: 'muted' }, ' — true from ', when(old.valid_from), ' until ', when(old.valid_to)),
        ),
      ),
    ),
  );
}

function card(ctx, entry) {
  const text = h('p', { class: 'text' }, entry.text);
  return h(
    'li',
    { class: 'card entry', dataset: { id: entry.id } },
    text,
    h(
      'p',
      { class: 'meta' },
      kindBadge(entry.kind),
      ' true since ',
      when(entry.valid_from),
      entry.category ? ` · ${entry.category}` : null,
      ` · importance ${entry.importance}`,
      entry.metadata?.key ? h('span', { class: 'muted' }, ` · key “${entry.metadata.key}”`) : null,
    ),
    origin(ctx, entry),
    replaced(entry),
    h(
      'div',
      { class: 'row' },
      memoryActions(ctx, entry, text, (message) => {
        ctx.status(message);
        ctx.refresh();
      }),
      ctx.link({ user: ctx.user, view: 'memory', id: entry.id }, 'History'),
    ),
  );
}

export async function render(ctx) {
  const offset = Number(ctx.params.get('offset')) || 0;
  const page = await api.get(path('/v1/profile', { user_id: ctx.user, limit: PAGE, offset }));
  if (!ctx.current()) return;
  const entries = page.entries;
  replace(
    ctx.main,
    h('h2', {}, `What engram believes about ${ctx.user}`),
    h(
      'p',
      { class: 'muted' },
      `${count(page.total)} current fact${page.total === 1 ? '' : 's'} and preference${page.total === 1 ? '' : 's'}, newest first.`,
    ),
    entries.length
      ? h('ul', { class: 'cards' }, entries.map((e) => card(ctx, e)))
      : h('p', {}, 'Nothing yet: facts and preferences appear here once the agent learns them, or when added with kind fact or preference.'),
    pager(ctx, offset, PAGE, Boolean(page.next_cursor)),
  );
}
