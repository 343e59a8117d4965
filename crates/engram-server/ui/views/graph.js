// Knowledge graph: entities and relations as a picture (drag or arrow keys to pan, wheel or
// +/- to zoom), and a panel with the observations of the entity chosen.

import { api, path } from '../api.js';
import { count, h, replace, svg } from '../dom.js';

/** Most entities drawn; beyond that the best connected are shown. */
const MAX_NODES = 300;

/** The picture's size, in its own units. */
const WIDTH = 1000;
const HEIGHT = 640;

/** Moves the laid-out nodes into the picture, with room for their labels. */
function fitInto(nodes) {
  const xs = nodes.map((n) => n.x);
  const ys = nodes.map((n) => n.y);
  const [minX, maxX, minY, maxY] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const margin = 40;
  const labelRoom = 140;
  const scale = Math.min(
    (WIDTH - 2 * margin - labelRoom) / Math.max(1, maxX - minX),
    (HEIGHT - 2 * margin) / Math.max(1, maxY - minY),
  );
  const spanX = (maxX - minX) * scale;
  const spanY = (maxY - minY) * scale;
  for (const node of nodes) {
    node.x = (WIDTH - labelRoom - spanX) / 2 + (node.x - minX) * scale;
    node.y = (HEIGHT - spanY) / 2 + (node.y - minY) * scale;
  }
}

/** Spring-and-charge layout, deterministic (the same graph always looks the same). */
function layout(nodes, edges, size) {
  const n = nodes.length;
  const k = Math.sqrt((size * size) / Math.max(1, n)) * 0.6;
  nodes.forEach((node, i) => {
    const angle = (2 * Math.PI * i) / Math.max(1, n);
    const radius = size * 0.35 * (0.6 + 0.4 * ((i * 7919) % 13) / 13);
    node.x = size / 2 + radius * Math.cos(angle);
    node.y = size / 2 + radius * Math.sin(angle);
  });
  const iterations = n > 150 ? 120 : 250;
  let temperature = size / 10;
  for (let step = 0; step < iterations; step++) {
    for (const node of nodes) {
      node.dx = 0;
      node.dy = 0;
    }
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const a = nodes[i];
        const b = nodes[j];
        let dx = a.x - b.x;
        let dy = a.y - b.y;
        const d2 = Math.max(dx * dx + dy * dy, 0.01);
        const force = (k * k) / d2;
        dx *= force;
        dy *= force;
        a.dx += dx;
        a.dy += dy;
        b.dx -= dx;
        b.dy -= dy;
      }
    }
    for (const [a, b] of edges) {
      const dx = a.x - b.x;
      const dy = a.y - b.y;
      const d = Math.max(Math.sqrt(dx * dx + dy * dy), 0.01);
      const force = d / k;
      a.dx -= dx * force;
      a.dy -= dy * force;
      b.dx += dx * force;
      b.dy += dy * force;
    }
    for (const node of nodes) {
      // Gravity keeps separate components in view.
      node.dx += (size / 2 - node.x) * 0.02;
      node.dy += (size / 2 - node.y) * 0.02;
      const length = Math.max(Math.sqrt(node.dx * node.dx + node.dy * node.dy), 0.01);
      node.x += (node.dx / length) * Math.min(length, temperature);
      node.y += (node.dy / length) * Math.min(length, temperature);
    }
    temperature *= 0.97;
  }
  fitInto(nodes);
}

function panel(ctx, entity, relations) {
  if (!entity) return h('p', { class: 'muted' }, 'Choose an entity to see what is known about it.');
  const out = relations.filter((r) => r.from === entity.name);
  const into = relations.filter((r) => r.to === entity.name);
  return [
    h('h3', {}, entity.name),
    entity.entityType ? h('p', { class: 'muted' }, entity.entityType) : null,
    h('h4', {}, `Observations (${entity.observations.length})`),
    entity.observations.length ? h('ul', {}, entity.observations.map((o) => h('li', {}, o))) : h('p', {}, 'None.'),
    out.length || into.length
      ? [
          h('h4', {}, 'Relations'),
          h(
            'ul',
            {},
            out.map((r) => h('li', {}, `${r.relationType} → ${r.to}`)),
            into.map((r) => h('li', {}, `${r.from} ${r.relationType} → this`)),
          ),
        ]
      : null,
    h('p', {}, ctx.link({ user: ctx.user, view: 'search', q: entity.name }, `Search memories for “${entity.name}”`)),
  ];
}

export async function render(ctx) {
  const graph = await api.get(path('/v1/graph', { user_id: ctx.user }));
  if (!ctx.current()) return;
  const { entities, relations } = graph;
  if (!entities.length) {
    replace(
      ctx.main,
      h('h2', {}, 'Knowledge graph'),
      h('p', {}, 'No entities yet. MCP clients build the graph with the create_entities and create_relations tools.'),
    );
    return;
  }
  const degree = new Map(entities.map((e) => [e.name, 0]));
  for (const r of relations) {
    degree.set(r.from, (degree.get(r.from) || 0) + 1);
    degree.set(r.to, (degree.get(r.to) || 0) + 1);
  }
  const shown = [...entities].sort((a, b) => degree.get(b.name) - degree.get(a.name) || a.name.localeCompare(b.name)).slice(0, MAX_NODES);
  const byName = new Map(shown.map((e) => [e.name, { entity: e }]));
  const nodes = [...byName.values()];
  const edges = relations.filter((r) => byName.has(r.from) && byName.has(r.to)).map((r) => [byName.get(r.from), byName.get(r.to), r]);
  const size = 800;
  layout(nodes, edges, size);

  const view = { x: 0, y: 0, k: 1 };
  const scene = svg('g', {});
  const apply = () => scene.setAttribute('transform', `translate(${view.x} ${view.y}) scale(${view.k})`);
  const side = h('aside', { class: 'card entity-panel', 'aria-live': 'polite' });
  let selectedNode = null;
  const select = (node, { focus = false } = {}) => {
    if (selectedNode) selectedNode.el.classList.remove('selected');
    selectedNode = node;
    if (node) node.el.classList.add('selected');
    replace(side, panel(ctx, node?.entity, relations));
    const p = new URLSearchParams(location.search);
    if (node) p.set('entity', node.entity.name);
    else p.delete('entity');
    history.replaceState(null, '', `?${p}`);
    if (focus && node) node.el.focus();
  };

  for (const [a, b, r] of edges) {
    scene.append(svg('line', { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: 'edge' }));
    scene.append(svg('text', { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2, class: 'edge-label' }, r.relationType));
  }
  for (const node of nodes) {
    const e = node.entity;
    const radius = 7 + Math.min(10, degree.get(e.name) * 1.5);
    node.el = svg(
      'g',
      {
        class: 'node',
        tabindex: 0,
        role: 'button',
        'aria-label': `${e.name}${e.entityType ? ` (${e.entityType})` : ''}, ${e.observations.length} observation${e.observations.length === 1 ? '' : 's'}`,
        onclick: (event) => {
          event.stopPropagation();
          select(node);
        },
        onkeydown: (event) => {
          if (event.key === 'Enter' || event.key === ' ') {
            event.preventDefault();
            select(node);
          }
        },
      },
      svg('circle', { cx: node.x, cy: node.y, r: radius }),
      svg('text', { x: node.x + radius + 3, y: node.y + 4 }, e.name),
    );
    scene.append(node.el);
  }

  const picture = svg('svg', {
    class: 'graph',
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    tabindex: 0,
    role: 'application',
    'aria-label': 'Knowledge graph: arrow keys pan, plus and minus zoom, Tab moves between entities',
  });
  picture.append(scene);
  apply();

  const zoom = (factor, cx = WIDTH / 2, cy = HEIGHT / 2) => {
    const k = Math.min(8, Math.max(0.2, view.k * factor));
    view.x = cx - ((cx - view.x) * k) / view.k;
    view.y = cy - ((cy - view.y) * k) / view.k;
    view.k = k;
    apply();
  };
  const toScene = (event) => {
    const box = picture.getBoundingClientRect();
    return [((event.clientX - box.left) / box.width) * WIDTH, ((event.clientY - box.top) / box.height) * HEIGHT];
  };
  picture.addEventListener(
    'wheel',
    (event) => {
      event.preventDefault();
      const [cx, cy] = toScene(event);
      zoom(event.deltaY < 0 ? 1.15 : 1 / 1.15, cx, cy);
    },
    { passive: false },
  );
  let drag = null;
  picture.addEventListener('pointerdown', (event) => {
    if (event.target.closest('.node')) return;
    drag = { start: toScene(event), x: view.x, y: view.y, id: event.pointerId };
    picture.setPointerCapture(event.pointerId);
  });
  picture.addEventListener('pointermove', (event) => {
    if (!drag || drag.id !== event.pointerId) return;
    const [x, y] = toScene(event);
    view.x = drag.x + x - drag.start[0];
    view.y = drag.y + y - drag.start[1];
    apply();
  });
  picture.addEventListener('pointerup', () => {
    drag = null;
  });
  picture.addEventListener('keydown', (event) => {
    const step = 40;
    const moves = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
    if (moves[event.key]) {
      event.preventDefault();
      view.x += moves[event.key][0];
      view.y += moves[event.key][1];
      apply();
    } else if (event.key === '+' || event.key === '=') {
      zoom(1.25);
    } else if (event.key === '-') {
      zoom(0.8);
    }
  });
  const fit = () => {
    view.x = 0;
    view.y = 0;
    view.k = 1;
    apply();
  };

  replace(
    ctx.main,
    h('h2', {}, 'Knowledge graph'),
    h(
      'p',
      { class: 'muted' },
      `${count(entities.length)} entities, ${count(relations.length)} relations.`,
      shown.length < entities.length ? ` The ${MAX_NODES} best connected are drawn.` : null,
    ),
    h(
      'div',
      { class: 'row', role: 'toolbar', 'aria-label': 'Zoom' },
      h('button', { type: 'button', onclick: () => zoom(1.25), 'aria-label': 'Zoom in' }, '+'),
      h('button', { type: 'button', onclick: () => zoom(0.8), 'aria-label': 'Zoom out' }, '−'),
      h('button', { type: 'button', onclick: fit }, 'Fit'),
    ),
    h('div', { class: 'graph-layout' }, h('div', { class: 'graph-frame' }, picture), side),
  );
  const wanted = ctx.params.get('entity');
  select(wanted ? byName.get(wanted) || null : null);
}
