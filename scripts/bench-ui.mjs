// The inspector's speed at scale (see scripts/bench-ui.sh, which runs this):
//   node bench-ui.mjs generate N FILE   writes N memories of user `bench` as JSONL
//   node bench-ui.mjs run URL RUNS      times the API routes and the pages in Chromium
// Needs ENGRAM_TEST_PLAYWRIGHT for `run` (scripts/setup-browser.sh prints it).

import { createRequire } from 'node:module';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [command, ...rest] = process.argv.slice(2);

/** SplitMix-style repeatable numbers, so every run measures the same data. */
function rng(seed) {
  let state = BigInt(seed);
  return () => {
    state = (state + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
    return Number((z ^ (z >> 31n)) % 1000000007n) / 1000000007;
  };
}

async function generate(count, file) {
  const random = rng(7);
  const syllables = ['ka', 'lo', 'mi', 'ran', 'te', 'su', 'vor', 'en', 'di', 'pa', 'shu', 'gel', 'or', 'ni', 'fa', 'bel'];
  const words = Array.from({ length: 3000 }, () => {
    const n = 2 + Math.floor(random() * 3);
    return Array.from({ length: n }, () => syllables[Math.floor(random() * syllables.length)]).join('');
  });
  // Zipf-like: common words come up far more often, as in speech.
  const word = () => words[Math.floor(words.length * random() ** 2.5)];
  const sentence = (n) => Array.from({ length: n }, word).join(' ');
  const start = Date.parse('2023-01-01T00:00:00Z');
  const span = 2 * 365 * 24 * 3600 * 1000;
  const out = createWriteStream(file);
  const write = (line) => (out.write(JSON.stringify(line) + '\n') ? null : new Promise((r) => out.once('drain', r)));
  // Profile entries: 300 fact keys and 200 preference keys, each said several times over
  // the two years; all but the last value of a key are closed, as merging leaves them.
  const profile = [];
  for (const [kind, keys, share] of [['fact', 300, 0.03], ['preference', 200, 0.02]]) {
    const n = Math.round(count * share);
    const byKey = new Map();
    for (let i = 0; i < n; i++) {
      const key = `${kind === 'fact' ? 'trait' : 'likes'} ${i % keys}`;
      const at = start + Math.floor(random() * span);
      if (!byKey.has(key)) byKey.set(key, []);
      byKey.get(key).push(at);
    }
    for (const [key, times] of byKey) {
      times.sort((a, b) => a - b);
      times.forEach((at, i) => {
        const line = {
          user_id: 'bench', kind, text: `${key}: ${sentence(3)} ${i}`, importance: 4,
          category: kind === 'fact' ? 'user_info' : 'user_preference',
          created_at: new Date(at).toISOString(), source: 'extraction',
          metadata: { key, session: `cli:s${Math.floor(random() * 1000)}` },
        };
        if (i + 1 < times.length) line.valid_to = new Date(times[i + 1]).toISOString();
        profile.push(line);
      });
    }
  }
  for (const line of profile) await write(line);
  for (let i = profile.length; i < count; i++) {
    const r = random();
    const kind = r < 0.02 ? 'note' : r < 0.03 ? 'summary' : 'episode';
    await write({
      user_id: 'bench', kind, text: `${sentence(8 + Math.floor(random() * 12))} ${i}`,
      created_at: new Date(start + Math.floor(random() * span)).toISOString(),
      session_id: kind === 'episode' ? `cli:s${Math.floor(random() * 1000)}` : undefined,
      importance: 1 + Math.floor(random() * 5),
    });
  }
  await new Promise((r) => out.end(r));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const ms = (x) => `${x.toFixed(0)} ms`;

async function run(base, runs) {
  const { chromium } = createRequire(join(process.env.ENGRAM_TEST_PLAYWRIGHT, 'index.js'))('playwright-core');
  const results = { api: {}, pages: {} };
  // The routes behind the first screen of each view, timed from here (one request at a time).
  const routes = {
    'GET /v1/profile (first page, 50)': '/v1/profile?user_id=bench&limit=50',
    'GET /v1/timeline (per day and kind)': '/v1/timeline?user_id=bench&tz=UTC&include_closed=true',
    'GET /v1/memories (first page, 100 episodes)': '/v1/memories?user_id=bench&kind=episode&limit=100&include_closed=true',
    'GET /v1/users': '/v1/users',
    'GET /v1/sessions': '/v1/sessions?user_id=bench',
  };
  for (const [name, path] of Object.entries(routes)) {
    const times = [];
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      const response = await fetch(base + path);
      await response.arrayBuffer();
      if (!response.ok) throw new Error(`${path}: ${response.status}`);
      times.push(performance.now() - t);
    }
    results.api[name] = { median: median(times), max: Math.max(...times) };
  }
  const profile = mkdtempSync(join(tmpdir(), 'engram-bench-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
      '--no-first-run', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
  });
  try {
    // Time from the start of navigation to the view drawn with its data (the page marks it).
    const pages = {
      profile: '?user=bench',
      timeline: '?user=bench&view=timeline',
      search: `?user=bench&q=${encodeURIComponent('kalo')}`,
      sessions: '?user=bench&view=sessions',
    };
    for (const [view, query] of Object.entries(pages)) {
      const times = [];
      for (let i = 0; i < runs; i++) {
        const page = await context.newPage();
        await page.goto(`${base}/ui/${query}`);
        await page.waitForSelector(`main[data-ready="${view}"]`, { timeout: 60000 });
        times.push(await page.evaluate((v) => performance.getEntriesByName(`engram:ready:${v}`)[0].startTime, view));
        await page.close();
      }
      results.pages[view] = { median: median(times), max: Math.max(...times) };
    }
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  for (const [name, t] of Object.entries(results.api)) console.log(`api   ${name.padEnd(45)} median ${ms(t.median).padStart(7)}  max ${ms(t.max)}`);
  for (const [name, t] of Object.entries(results.pages)) console.log(`page  ${name.padEnd(45)} median ${ms(t.median).padStart(7)}  max ${ms(t.max)}`);
  console.log(JSON.stringify(results));
}

if (command === 'generate') await generate(Number(rest[0]), rest[1]);
else if (command === 'run') await run(rest[0], Number(rest[1] || 9));
else {
  console.error('usage: bench-ui.mjs generate N FILE | run URL [RUNS]');
  process.exit(2);
}
