// Search: ranked results with `explain` drawn as one bar per part of the score (lexical,
// dense, recency, importance, time phrase), and the filters of the API.

import { api } from '../api.js';
import { KINDS, dayBounds, h, replace, when } from '../dom.js';
import { kindBadge } from './parts.js';

const LIMIT = 50;
const PARTS = [
  ['lexical', 'Lexical'],
  ['dense', 'Dense'],
  ['recency', 'Recency'],
  ['importance', 'Importance'],
  ['time_match', 'Time phrase'],
];
/** The URL parameters of this view's form. */
const FIELDS = ['q', 'kind', 'category', 'min_importance', 'since', 'until', 'agent', 'session', 'closed'];

function field(id, label, input) {
  input.id = id;
  input.name = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

function form(ctx) {
  const p = ctx.params;
  const chosen = new Set((p.get('kind') || '').split(',').filter(Boolean));
  const q = h('input', { type: 'search', value: p.get('q') || '', required: true, autocomplete: 'off' });
  const kinds = h(
    'fieldset',
    { class: 'kinds' },
    h('legend', {}, 'Kinds'),
    KINDS.map((k) =>
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'kind', value: k, checked: chosen.has(k) }), ` ${k}`),
    ),
  );
  const importance = h(
    'select',
    {},
    h('option', { value: '' }, 'any'),
    [1, 2, 3, 4, 5].map((n) => h('option', { value: n, selected: p.get('min_importance') === String(n) }, `${n} or more`)),
  );
  const el = h(
    'form',
    {
      class: 'search card',
      role: 'search',
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(el);
        const values = { user: ctx.user, view: 'search' };
        for (const name of FIELDS) {
          if (name === 'kind') values.kind = data.getAll('kind').join(',');
          else if (name === 'closed') values.closed = data.get('closed') ? '1' : '';
          else values[name] = (data.get(name) || '').toString().trim();
        }
        ctx.go(values);
      },
    },
    h('div', { class: 'row grow' }, field('q', 'Search', q), h('button', { type: 'submit' }, 'Search')),
    h(
      'details',
      { class: 'filters', open: FIELDS.slice(1).some((f) => p.get(f)) },
      h('summary', {}, 'Filters'),
      kinds,
      h(
        'div',
        { class: 'grid' },
        field('category', 'Category', h('input', { value: p.get('category') || '' })),
        field('min_importance', 'Importance', importance),
        field('since', 'From (day)', h('input', { type: 'date', value: p.get('since') || '' })),
        field('until', 'To (day, included)', h('input', { type: 'date', value: p.get('until') || '' })),
        field('agent', 'Agent', h('input', { value: p.get('agent') || '' })),
        field('session', 'Session', h('input', { value: p.get('session') || '' })),
      ),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'closed', checked: p.get('closed') === '1' }), ' include invalidated and expired memories'),
    ),
  );
  return el;
}

function request(ctx) {
  const p = ctx.params;
  const body = { user_id: ctx.user, query: p.get('q'), limit: LIMIT, explain: true };
  const kinds = (p.get('kind') || '').split(',').filter(Boolean);
  if (kinds.length) body.kinds = kinds;
  if (p.get('category')) body.categories = p.get('category').split(',').map((c) => c.trim()).filter(Boolean);
  if (p.get('min_importance')) body.min_importance = Number(p.get('min_importance'));
  if (p.get('since')) body.since = dayBounds(p.get('since'))[0];
  if (p.get('until')) body.until = dayBounds(p.get('until'))[1];
  if (p.get('agent')) body.agent_id = p.get('agent');
  if (p.get('session')) body.session_id = p.get('session');
  if (p.get('closed') === '1') body.include_closed = true;
  return body;
}

function bars(hit, scale) {
  const c = hit.explain?.contributions;
  if (!c) return null;
  return h(
    'dl',
    { class: 'bars', 'aria-label': `How the score ${hit.score.toFixed(3)} came about` },
    PARTS.filter(([key]) => key !== 'time_match' || c.time_match > 0).map(([key, label]) => {
      const bar = h('span', { class: `bar bar-${key}` });
      bar.style.width = `${scale > 0 ? Math.max(0, (c[key] / scale) * 100) : 0}%`;
      return [
        h('dt', {}, label),
        h('dd', {}, h('span', { class: 'track' }, bar), h('span', { class: 'value' }, c[key].toFixed(3))),
      ];
    }),
  );
}

function result(ctx, hit, scale) {
  const why = [];
  if (hit.explain?.lexical_rank) why.push(`lexical #${hit.explain.lexical_rank}`);
  if (hit.explain?.dense_rank) why.push(`dense #${hit.explain.dense_rank}`);
  if (hit.explain?.time_match) why.push(`in “${hit.explain.time_match}”`);
  return h(
    'li',
    { class: hit.valid_to ? 'card hit closed' : 'card hit' },
    h('p', { class: 'text' }, ctx.link({ user: ctx.user, view: 'memory', id: hit.id }, hit.text)),
    h(
      'p',
      { class: 'meta' },
      kindBadge(hit.kind),
      ' ',
      when(hit.created_at),
      hit.session_id ? ` · session ${hit.session_id}` : null,
      hit.valid_to ? ' · invalidated' : null,
      ` · score ${hit.score.toFixed(3)}`,
      why.length ? ` (${why.join(', ')})` : null,
    ),
    bars(hit, scale),
  );
}

export async function render(ctx) {
  const el = form(ctx);
  const results = h('section', { 'aria-label': 'Results' });
  replace(ctx.main, h('h2', {}, 'Search'), el, results);
  if (!ctx.params.get('q')) {
    el.querySelector('#q').focus();
    replace(results, h('p', { class: 'muted' }, `Search ${ctx.user}’s memories by words and meaning.`));
    return;
  }
  const answer = await api.post('/v1/memories/search', request(ctx));
  if (!ctx.current()) return;
  const hits = answer.results;
  const scale = Math.max(0, ...hits.map((hit) => hit.score));
  replace(
    results,
    (answer.notices || []).map((n) => h('p', { class: 'notice' }, n)),
    h('p', { class: 'muted', role: 'status' }, hits.length ? `${hits.length} result${hits.length === 1 ? '' : 's'}, best first.` : 'Nothing found.'),
    h('ol', { class: 'cards' }, hits.map((hit) => result(ctx, hit, scale))),
  );
}
