// Pieces the views share: kind badges, the edit / invalidate / delete actions, paging.

import { api } from '../api.js';
import { h, replace } from '../dom.js';

export function kindBadge(kind) {
  return h('span', { class: `kind kind-${kind}` }, kind);
}

/** A short quote of a memory's text for questions and labels. */
export function quote(text, max = 60) {
  const one = text.replace(/\s+/g, ' ').trim();
  return `“${one.length > max ? one.slice(0, max - 1) + '…' : one}”`;
}

/**
 * Edit, invalidate and delete for one memory. `textEl` is the element showing its text (the
 * editor takes its place); after a change, `done(message)` runs.
 */
export function memoryActions(ctx, memory, textEl, done) {
  const closed = Boolean(memory.valid_to);
  const edit = h('button', { type: 'button', class: 'quiet', 'aria-label': `Edit ${quote(memory.text, 40)}` }, 'Edit');
  edit.addEventListener('click', () => {
    const id = `edit-${memory.id}`;
    const area = h('textarea', { id, rows: Math.min(8, Math.max(2, Math.ceil(memory.text.length / 60))) });
    area.value = memory.text;
    const form = h(
      'form',
      {
        class: 'editor',
        onsubmit: async (event) => {
          event.preventDefault();
          const text = area.value.trim();
          if (!text || text === memory.text) return cancel();
          try {
            await api.patch(`/v1/memories/${memory.id}`, { text });
            done('Saved. The old text is kept in the memory’s history.');
          } catch (e) {
            replace(message, e.message);
          }
        },
        onkeydown: (event) => {
          if (event.key === 'Escape') cancel();
        },
      },
      h('label', { for: id }, 'New text'),
      area,
      h('div', { class: 'row' }, h('button', { type: 'submit' }, 'Save'), h('button', { type: 'button', class: 'quiet', onclick: () => cancel() }, 'Cancel')),
    );
    const message = h('p', { class: 'error', role: 'alert' });
    form.append(message);
    const cancel = () => {
      form.replaceWith(textEl);
      edit.focus();
    };
    textEl.replaceWith(form);
    area.focus();
  });
  const invalidate = h(
    'button',
    {
      type: 'button',
      class: 'quiet',
      disabled: closed,
      'aria-label': `Invalidate ${quote(memory.text, 40)}`,
      onclick: async () => {
        const ok = await ctx.confirm(
          `Invalidate ${quote(memory.text)}? It is kept, with its history, but no longer counts as true.`,
          'Invalidate',
        );
        if (!ok) return;
        try {
          await api.post(`/v1/memories/${memory.id}/invalidate`, {});
          done('Invalidated. It stays in history.');
        } catch (e) {
          ctx.status(`Not invalidated: ${e.message}`);
        }
      },
    },
    'Invalidate',
  );
  const del = h(
    'button',
    {
      type: 'button',
      class: 'quiet danger',
      'aria-label': `Delete ${quote(memory.text, 40)}`,
      onclick: async () => {
        const ok = await ctx.confirm(`Delete ${quote(memory.text)}? Its history keeps a record of the deletion.`, 'Delete');
        if (!ok) return;
        try {
          await api.del(`/v1/memories/${memory.id}`);
          done('Deleted. Its history records the deletion.');
        } catch (e) {
          ctx.status(`Not deleted: ${e.message}`);
        }
      },
    },
    'Delete',
  );
  return h('div', { class: 'actions' }, edit, invalidate, del);
}

/** Previous / next links for a page of a listing at `offset`. */
export function pager(ctx, offset, limit, hasMore, extra = {}) {
  if (offset === 0 && !hasMore) return null;
  const base = { ...Object.fromEntries(ctx.params), ...extra };
  const prev = offset > 0 ? ctx.link({ ...base, offset: Math.max(0, offset - limit) || '' }, '← Newer') : null;
  const next = hasMore ? ctx.link({ ...base, offset: offset + limit }, 'Older →') : null;
  return h('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, h('span', {}, `${offset + 1}–${offset + limit}`), next);
}

/** A compact one-line memory for lists: kind, text (a link to it), when. */
export function memoryLine(ctx, memory, extra) {
  return h(
    'li',
    { class: memory.valid_to ? 'memory closed' : 'memory' },
    kindBadge(memory.kind),
    ' ',
    ctx.link({ user: ctx.user, view: 'memory', id: memory.id }, memory.text),
    extra,
  );
}
