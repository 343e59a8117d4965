// Timeline: a histogram of memories per day, stacked by kind; below it the episodes by day,
// newest first, or every memory of the day clicked.

import { api, path } from '../api.js';
import { KINDS, count, dayBounds, h, localDay, replace, svg, timeZone } from '../dom.js';
import { memoryLine, pager } from './parts.js';

const PAGE = 100;
const HEIGHT = 120;

/** Every day from the first to the last, as YYYY-MM-DD. */
function daysBetween(first, last) {
  const out = [];
  const [y, m, d] = first.split('-').map(Number);
  for (let date = new Date(y, m - 1, d); ; date.setDate(date.getDate() + 1)) {
    const day = localDay(date);
    out.push(day);
    if (day >= last || out.length > 20000) return out;
  }
}

// The timeline is the record of what was remembered when: memories later invalidated or
// expired are part of it (struck through in the lists). Counting them also keeps the
// histogram to the store's index, fast for a user with 100,000 memories.
async function counts(ctx) {
  const zone = timeZone();
  const query = (tz) => path('/v1/timeline', { user_id: ctx.user, tz, include_closed: true });
  try {
    return await api.get(query(zone));
  } catch (e) {
    // A server without this zone's rules still knows UTC.
    if (e.code === 'invalid_request' && zone !== 'UTC') return api.get(query('UTC'));
    throw e;
  }
}

function histogram(ctx, days, selected) {
  if (!days.length) return h('p', {}, 'No memories yet.');
  const byDay = new Map(days.map((d) => [d.day, d]));
  const all = daysBetween(days[0].day, days[days.length - 1].day);
  const max = Math.max(...days.map((d) => d.total));
  // Wide enough to point at; a long history scrolls sideways (it opens at the latest days).
  const width = Math.max(6, Math.min(18, Math.floor(960 / all.length)));
  const chart = svg('svg', {
    class: 'histogram',
    width: all.length * width,
    height: HEIGHT + 4,
    role: 'group',
    'aria-label': `Memories per day, ${all[0]} to ${all[all.length - 1]}`,
  });
  all.forEach((day, i) => {
    const d = byDay.get(day);
    if (!d) return;
    const target = { user: ctx.user, view: 'timeline', day };
    const label = `${day}: ${count(d.total)} memor${d.total === 1 ? 'y' : 'ies'} (${KINDS.filter((k) => d.kinds[k])
      .map((k) => `${d.kinds[k]} ${k}`)
      .join(', ')})`;
    const link = svg('a', {
      href: `?${new URLSearchParams(target)}`,
      'aria-label': label,
      class: day === selected ? 'day selected' : 'day',
      onclick: (event) => {
        event.preventDefault();
        ctx.go(target);
      },
    });
    link.append(svg('title', {}, label));
    let y = HEIGHT;
    link.append(svg('rect', { x: i * width, y: 0, width, height: HEIGHT, class: 'hit' }));
    for (const kind of KINDS) {
      const n = d.kinds[kind] || 0;
      if (!n) continue;
      const barHeight = Math.max(1, (n / max) * HEIGHT);
      y -= barHeight;
      link.append(svg('rect', { x: i * width + 0.5, y, width: Math.max(1, width - 1), height: barHeight, class: `k-${kind}` }));
    }
    chart.append(link);
  });
  const legend = h(
    'ul',
    { class: 'legend' },
    KINDS.map((k) => h('li', {}, h('span', { class: `swatch k-${k}` }), k)),
  );
  const scroller = h('div', { class: 'scroll' }, chart);
  // Once laid out, show the chosen day, or the latest ones.
  requestAnimationFrame(() => {
    const index = selected ? all.indexOf(selected) : all.length - 1;
    scroller.scrollLeft = Math.max(0, (index + 1) * width - scroller.clientWidth / 2);
  });
  return h(
    'figure',
    { class: 'timeline' },
    scroller,
    h(
      'figcaption',
      {},
      legend,
      h('span', { class: 'muted' }, `Memories recorded per day, invalidated ones included; ${all[0]} – ${all[all.length - 1]}, up to ${count(max)} a day. Choose a day to see it.`),
    ),
  );
}

function grouped(ctx, memories) {
  const groups = new Map();
  for (const m of memories) {
    const day = localDay(new Date(m.created_at));
    if (!groups.has(day)) groups.set(day, []);
    groups.get(day).push(m);
  }
  return [...groups].map(([day, list]) =>
    h(
      'section',
      { class: 'day-group' },
      h('h3', {}, ctx.link({ user: ctx.user, view: 'timeline', day }, day)),
      h('ul', { class: 'lines' }, list.map((m) => memoryLine(ctx, m, h('span', { class: 'muted' }, ` ${new Date(m.created_at).toLocaleTimeString()}`)))),
    ),
  );
}

export async function render(ctx) {
  const day = ctx.params.get('day');
  // Without a day the list shows episodes; `all` shows every kind.
  const kind = ctx.params.get('kind') || (day ? 'all' : 'episode');
  const offset = Number(ctx.params.get('offset')) || 0;
  const query = { user_id: ctx.user, limit: PAGE, offset, kind: kind === 'all' ? undefined : kind, include_closed: true };
  if (day) [query.since, query.until] = dayBounds(day);
  const [days, page] = await Promise.all([counts(ctx), api.get(path('/v1/memories', query))]);
  if (!ctx.current()) return;
  const select = h(
    'select',
    { id: 'kind', onchange: () => ctx.go({ user: ctx.user, view: 'timeline', day, kind: select.value }) },
    h('option', { value: 'all' }, 'all kinds'),
    KINDS.map((k) => h('option', { value: k, selected: k === kind }, `${k}s`)),
  );
  const list = page.memories;
  replace(
    ctx.main,
    h('h2', {}, `${ctx.user} over time`),
    histogram(ctx, days.days, day),
    days.time_zone !== timeZone() ? h('p', { class: 'notice' }, `Days are counted in ${days.time_zone}.`) : null,
    h(
      'div',
      { class: 'row' },
      h('h3', {}, day ? `On ${day}` : 'Most recent'),
      h('label', { for: 'kind' }, 'Show'),
      select,
      day ? ctx.link({ user: ctx.user, view: 'timeline' }, 'All days') : null,
    ),
    list.length ? grouped(ctx, list) : h('p', {}, 'Nothing here.'),
    pager(ctx, offset, PAGE, Boolean(page.next_cursor)),
  );
}
