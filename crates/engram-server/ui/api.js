// The public REST API, and nothing else: every call carries the signed-in token (kept in this
// tab's session storage) as a bearer token.

const TOKEN_KEY = 'engram.token';

/** An error answered by the API: HTTP status, stable code, one-line message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function signIn(value) {
  sessionStorage.setItem(TOKEN_KEY, value.trim());
}

export function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra) {
  const all = { Accept: 'application/json', ...extra };
  const t = token();
  if (t) all.Authorization = `Bearer ${t}`;
  return all;
}

async function failure(response) {
  let code = 'http_' + response.status;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(response.status, code, message);
}

/** A path with query parameters; undefined, null, '' and false values are left out. */
export function path(base, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === '' || value === false) continue;
    for (const one of Array.isArray(value) ? value : [value]) query.append(key, String(one));
  }
  const text = query.toString();
  return text ? `${base}?${text}` : base;
}

async function call(method, url, body, contentType = 'application/json') {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': contentType }) };
  if (body !== undefined) init.body = contentType === 'application/json' ? JSON.stringify(body) : body;
  let response;
  try {
    response = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, 'network', `the server cannot be reached (${e.message})`);
  }
  if (!response.ok) throw await failure(response);
  return response;
}

export const api = {
  get: async (url) => (await call('GET', url)).json(),
  post: async (url, body) => (await call('POST', url, body)).json(),
  patch: async (url, body) => (await call('PATCH', url, body)).json(),
  del: async (url) => (await call('DELETE', url)).json(),
  /** Posts a JSONL body (an import file). */
  postLines: async (url, text) => (await call('POST', url, text, 'application/x-ndjson')).json(),
  /** The raw response (for downloads). */
  raw: (url) => call('GET', url),
};
