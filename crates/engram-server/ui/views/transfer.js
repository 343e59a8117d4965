// Import (a JSONL file, the format engram export writes) and export (a download) for a user.

import { api, path } from '../api.js';
import { count, h, replace } from '../dom.js';

function summary(result) {
  const rejected = result.errors || [];
  return h(
    'div',
    { class: 'card', role: 'status' },
    h(
      'p',
      {},
      `Imported ${count(result.added)} memor${result.added === 1 ? 'y' : 'ies'}; ${count(result.duplicates)} already known; ${count(result.rejected)} rejected.`,
    ),
    rejected.length
      ? h(
          'ul',
          { class: 'rejected' },
          rejected.slice(0, 100).map((r) => h('li', {}, `line ${r.line}: ${r.error.message}`)),
          rejected.length > 100 ? h('li', {}, `… and ${count(rejected.length - 100)} more`) : null,
        )
      : null,
  );
}

export async function render(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const file = h('input', { id: 'file', name: 'file', type: 'file', accept: '.jsonl,.ndjson,.json,application/x-ndjson', required: true });
  const importForm = h(
    'form',
    {
      class: 'card',
      onsubmit: async (event) => {
        event.preventDefault();
        const chosen = file.files[0];
        if (!chosen) return;
        const button = importForm.querySelector('button');
        button.disabled = true;
        replace(out, h('p', {}, `Importing ${chosen.name}…`));
        try {
          const result = await api.postLines(path('/v1/import', { user_id: ctx.user }), await chosen.text());
          replace(out, summary(result));
        } catch (e) {
          replace(out, h('p', { class: 'error', role: 'alert' }, `Not imported: ${e.message}`));
        } finally {
          button.disabled = false;
        }
      },
    },
    h('h3', {}, 'Import'),
    h(
      'p',
      {},
      'One JSON object a line, as ',
      h('code', {}, 'engram export'),
      ` writes it. Lines without user_id are ${ctx.user}’s; lines for another user are refused. The same text in the same scope is stored once.`,
    ),
    h('label', { for: 'file' }, 'JSONL file'),
    file,
    h('button', { type: 'submit' }, 'Import'),
    out,
  );
  const exported = h('p', { 'aria-live': 'polite' });
  const exportButton = h(
    'button',
    {
      type: 'button',
      onclick: async () => {
        exportButton.disabled = true;
        replace(exported, 'Preparing…');
        try {
          const response = await api.raw(path('/v1/export', { user_id: ctx.user }));
          const blob = await response.blob();
          const url = URL.createObjectURL(blob);
          const a = h('a', { href: url, download: `engram-${ctx.user}.jsonl` }, 'download');
          document.body.append(a);
          a.click();
          a.remove();
          setTimeout(() => URL.revokeObjectURL(url), 60_000);
          replace(exported, `Exported ${count(blob.size)} bytes.`);
        } catch (e) {
          replace(exported, h('span', { class: 'error', role: 'alert' }, `Not exported: ${e.message}`));
        } finally {
          exportButton.disabled = false;
        }
      },
    },
    `Download ${ctx.user}’s memories`,
  );
  replace(
    ctx.main,
    h('h2', {}, 'Import & export'),
    importForm,
    h(
      'section',
      { class: 'card' },
      h('h3', {}, 'Export'),
      h('p', {}, 'Every memory, current and closed, oldest first, as JSONL that import (here or engram import) reads back identically.'),
      exportButton,
      exported,
    ),
  );
}
