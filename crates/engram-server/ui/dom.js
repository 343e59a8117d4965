// Small DOM helpers: elements from data (never from HTML strings, so memory text is always
// shown as text), dates, and a word diff for history.

/** h('a', {href, onclick}, child, ...) makes an element; strings become text nodes. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key in el && typeof value !== 'string') {
      el[key] = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An SVG element (SVG needs its namespace). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const dateOnly = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });

/** A <time> for an RFC 3339 timestamp, in the reader's time zone. */
export function when(iso, options = {}) {
  if (!iso) return '—';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const text = (options.dateOnly ? dateOnly : dateTime).format(date);
  return h('time', { datetime: iso, title: iso }, text);
}

/** YYYY-MM-DD of a Date in the reader's time zone. */
export function localDay(date) {
  const pad = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

/** The start of a local day (YYYY-MM-DD) and of the next one, as RFC 3339 instants. */
export function dayBounds(day) {
  const [y, m, d] = day.split('-').map(Number);
  const start = new Date(y, m - 1, d);
  const end = new Date(y, m - 1, d + 1);
  return [start.toISOString(), end.toISOString()];
}

/** The reader's IANA time zone (UTC when the browser does not say). */
export function timeZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** Numbers for people: 12,345. */
export function count(n) {
  return new Intl.NumberFormat().format(n);
}

/**
 * A word diff of two texts: [{op: 'same'|'del'|'ins', text}], by longest common subsequence
 * over words and the spaces between them. Long texts fall back to one replacement, so a diff
 * never costs more than about a million steps.
 */
export function diffWords(before, after) {
  const a = (before || '').split(/(\s+)/).filter((t) => t !== '');
  const b = (after || '').split(/(\s+)/).filter((t) => t !== '');
  if (a.length * b.length > 1_000_000) {
    return [
      { op: 'del', text: before || '' },
      { op: 'ins', text: after || '' },
    ].filter((p) => p.text);
  }
  // lengths[i][j]: longest common subsequence of a[i..] and b[j..].
  const lengths = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lengths[i][j] = a[i] === b[j] ? lengths[i + 1][j + 1] + 1 : Math.max(lengths[i + 1][j], lengths[i][j + 1]);
    }
  }
  const parts = [];
  const push = (op, text) => {
    const last = parts[parts.length - 1];
    if (last && last.op === op) last.text += text;
    else parts.push({ op, text });
  };
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      push('same', a[i]);
      i++;
      j++;
    } else if (lengths[i + 1][j] >= lengths[i][j + 1]) {
      push('del', a[i++]);
    } else {
      push('ins', b[j++]);
    }
  }
  while (i < a.length) push('del', a[i++]);
  while (j < b.length) push('ins', b[j++]);
  return parts;
}

/** A diff as <del>/<ins> inline elements. */
export function diffView(before, after) {
  return h(
    'p',
    { class: 'diff' },
    diffWords(before, after).map((part) =>
      part.op === 'same' ? part.text : h(part.op, {}, part.text),
    ),
  );
}

/** The memory kinds, in the order the page lists them. */
export const KINDS = ['episode', 'fact', 'preference', 'note', 'summary'];
