// One memory: every field, its history as a diff between versions, and the actions.

import { ApiError, api } from '../api.js';
import { diffView, h, replace, when } from '../dom.js';
import { kindBadge, memoryActions } from './parts.js';

const FIELDS = [
  ['id', 'Id'],
  ['user_id', 'User'],
  ['agent_id', 'Agent'],
  ['session_id', 'Session'],
  ['kind', 'Kind'],
  ['category', 'Category'],
  ['importance', 'Importance'],
  ['created_at', 'Created'],
  ['updated_at', 'Updated'],
  ['valid_from', 'True from'],
  ['valid_to', 'True until'],
  ['expires_at', 'Expires'],
  ['source', 'Source'],
  ['content_hash', 'Content hash'],
];
const TIMES = new Set(['created_at', 'updated_at', 'valid_from', 'valid_to', 'expires_at']);

function fields(ctx, m) {
  return h(
    'dl',
    { class: 'fields' },
    FIELDS.map(([key, label]) => {
      let value = m[key];
      if (TIMES.has(key)) value = value ? when(value) : '—';
      else if (key === 'kind') value = kindBadge(value);
      else if (key === 'session_id' && value) value = ctx.link({ user: ctx.user, view: 'sessions', session: value }, value);
      else if (value === null || value === undefined || value === '') value = '—';
      return [h('dt', {}, label), h('dd', { class: key === 'id' || key === 'content_hash' ? 'mono' : null }, value)];
    }),
    h('dt', {}, 'Metadata'),
    h('dd', {}, Object.keys(m.metadata || {}).length ? h('pre', {}, JSON.stringify(m.metadata, null, 2)) : '—'),
  );
}

const VERBS = { add: 'Added', update: 'Changed', invalidate: 'Invalidated', delete: 'Deleted' };

function historyList(events) {
  if (!events.length) return h('p', {}, 'No history.');
  return h(
    'ol',
    { class: 'history' },
    events.map((e) =>
      h(
        'li',
        { class: `event event-${e.event}` },
        h('p', { class: 'meta' }, h('strong', {}, VERBS[e.event] || e.event), ' by ', h('code', {}, e.actor), ' on ', when(e.at)),
        e.event === 'update' && e.old_text !== e.new_text
          ? diffView(e.old_text, e.new_text)
          : e.event === 'update'
            ? h('p', { class: 'muted' }, 'Text unchanged (other fields changed).')
            : e.new_text || e.old_text
              ? h('p', { class: 'text' }, e.new_text || e.old_text)
              : null,
      ),
    ),
  );
}

export async function render(ctx) {
  const id = ctx.params.get('id');
  if (!id) {
    replace(ctx.main, h('p', {}, 'No memory chosen.'));
    return;
  }
  let memory = null;
  try {
    memory = await api.get(`/v1/memories/${encodeURIComponent(id)}`);
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 404)) throw e;
  }
  let events = [];
  try {
    events = (await api.get(`/v1/memories/${encodeURIComponent(id)}/history`)).events;
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 404)) throw e;
    if (!memory) {
      replace(ctx.main, h('h2', {}, 'Memory'), h('p', { class: 'error', role: 'alert' }, e.message));
      return;
    }
  }
  if (!ctx.current()) return;
  const text = memory ? h('p', { class: 'text big' }, memory.text) : null;
  replace(
    ctx.main,
    h('h2', {}, 'Memory'),
    memory
      ? h(
          'section',
          { class: memory.valid_to ? 'card closed' : 'card' },
          text,
          memory.valid_to ? h('p', { class: 'notice' }, 'Invalidated: kept for the record, no longer current.') : null,
          memoryActions(ctx, memory, text, (message) => {
            ctx.status(message);
            ctx.refresh();
          }),
          fields(ctx, memory),
        )
      : h('p', { class: 'notice' }, 'This memory was deleted; its history remains.'),
    h('h3', {}, 'History'),
    historyList(events),
  );
}
