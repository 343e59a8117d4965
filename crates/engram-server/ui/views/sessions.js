// Sessions: the user's conversations, and one conversation's messages with tool calls and
// their results folded; the memories that came from it below.

import { ApiError, api, path } from '../api.js';
import { count, h, replace, when } from '../dom.js';
import { memoryLine, pager } from './parts.js';

const PAGE = 200;

function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function message(m, names, highlight) {
  const cls = `message role-${m.role}${highlight ? ' highlight' : ''}`;
  const head = h('p', { class: 'meta' }, h('strong', {}, m.role), ' ', when(m.timestamp));
  if (m.role === 'system') {
    return h('li', { class: cls }, h('details', {}, h('summary', {}, 'System prompt'), h('pre', {}, m.content)));
  }
  if (m.role === 'tool') {
    const name = names.get(m.tool_call_id) || 'tool';
    return h(
      'li',
      { class: cls },
      h('details', {}, h('summary', {}, `Result of ${name}${m.is_error ? ' (failed)' : ''}`), h('pre', {}, m.content)),
    );
  }
  return h(
    'li',
    { class: cls, dataset: { index: m.index } },
    head,
    m.content ? h('p', { class: 'text' }, m.content) : null,
    (m.tool_calls || []).map((call) =>
      h('details', { class: 'tool-call' }, h('summary', {}, `Tool call: ${call.name}`), h('pre', {}, pretty(call.arguments))),
    ),
  );
}

async function list(ctx) {
  const { sessions } = await api.get(path('/v1/sessions', { user_id: ctx.user }));
  if (!ctx.current()) return;
  replace(
    ctx.main,
    h('h2', {}, `${ctx.user}’s sessions`),
    sessions.length
      ? h(
          'table',
          { class: 'sessions' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Session'), h('th', { scope: 'col' }, 'Messages'), h('th', { scope: 'col' }, 'Memories'), h('th', { scope: 'col' }, 'Last'))),
          h(
            'tbody',
            {},
            sessions.map((s) =>
              h(
                'tr',
                {},
                h('th', { scope: 'row' }, ctx.link({ user: ctx.user, view: 'sessions', session: s.session_id }, s.session_id)),
                h('td', {}, count(s.messages)),
                h('td', {}, count(s.memories)),
                h('td', {}, when(s.last_at)),
              ),
            ),
          ),
        )
      : h('p', {}, 'No sessions yet: engram chat, engram run and the gateway keep one per conversation.'),
  );
}

async function one(ctx, key) {
  const offset = Number(ctx.params.get('offset')) || 0;
  const at = ctx.params.get('at');
  let transcript = null;
  try {
    transcript = await api.get(path(`/v1/sessions/${encodeURIComponent(key)}/messages`, { user_id: ctx.user, limit: PAGE, offset }));
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 404)) throw e;
  }
  let memories = null;
  try {
    memories = await api.get(path(`/v1/sessions/${encodeURIComponent(key)}`, { user_id: ctx.user, limit: 50, include_closed: true }));
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 404)) throw e;
  }
  if (!ctx.current()) return;
  const messages = transcript?.messages || [];
  const names = new Map();
  for (const m of messages) for (const call of m.tool_calls || []) names.set(call.id, call.name);
  // The message a memory came from: the last one said at or before the memory's time.
  let highlight = -1;
  if (at) {
    const t = new Date(at).getTime();
    messages.forEach((m, i) => {
      if (m.role === 'user' && new Date(m.timestamp).getTime() <= t + 1000) highlight = i;
    });
  }
  replace(
    ctx.main,
    h('p', {}, ctx.link({ user: ctx.user, view: 'sessions' }, '← All sessions')),
    h('h2', {}, `Session ${key}`),
    transcript
      ? [
          h('p', { class: 'muted' }, `${count(transcript.total)} messages.`),
          h('ol', { class: 'conversation' }, messages.map((m, i) => message(m, names, i === highlight))),
          pager(ctx, offset, PAGE, Boolean(transcript.next_cursor)),
        ]
      : h('p', { class: 'muted' }, 'No transcript is kept for this session; only the memories that name it.'),
    h('h3', {}, 'Memories from this session'),
    memories?.memories?.length ? h('ul', { class: 'lines' }, memories.memories.map((m) => memoryLine(ctx, m))) : h('p', {}, 'None.'),
  );
  const marked = ctx.main.querySelector('.highlight');
  if (marked) marked.scrollIntoView({ block: 'center' });
}

export async function render(ctx) {
  const key = ctx.params.get('session');
  if (key) await one(ctx, key);
  else await list(ctx);
}
