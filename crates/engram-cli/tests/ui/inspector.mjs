// Drives the memory inspector in Debian's Chromium (headless) with Playwright, against a real
// `engram serve` that tests/ui.rs started and filled. Every step checks what the page shows;
// the first failure ends the run with a non-zero exit and the reason. Screenshots of each view
// go to the folder given.
//
// Usage: node inspector.mjs MODE BASE_URL SCREENSHOT_DIR [ALICE_TOKEN BOB_TOKEN IMPORT_FILE]
//   MODE tokens: sign in, every view, edits, import, export, and bob's token that cannot see alice
//   MODE local:  a loopback server without tokens opens with no sign-in
// Needs ENGRAM_TEST_PLAYWRIGHT (a node_modules folder with playwright-core).

import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [mode, base, shots, aliceToken, bobToken, importFile] = process.argv.slice(2);
const modules = process.env.ENGRAM_TEST_PLAYWRIGHT;
if (!modules) {
  console.error('ENGRAM_TEST_PLAYWRIGHT is not set (run scripts/setup-browser.sh)');
  process.exit(2);
}
const { chromium } = createRequire(join(modules, 'index.js'))('playwright-core');

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

let checks = 0;
function check(condition, message) {
  checks += 1;
  if (!condition) throw new Error(`check failed: ${message}`);
}

const screenshots = [];
async function shot(page, name) {
  const file = join(shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  screenshots.push(file);
}

/** Waits until the page says a view is rendered (main[data-ready=view]). */
async function ready(page, view) {
  await page.waitForSelector(`main[data-ready="${view}"]`, { timeout: 15000 });
}

async function go(page, query, view) {
  await page.goto(`${base}/ui/${query}`);
  await ready(page, view);
}

/** Every form control has a label a screen reader reads. */
async function everyControlLabelled(page, where) {
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll('input, select, textarea, button')]
      .filter((el) => el.type !== 'hidden' && el.offsetParent !== null)
      .filter((el) => {
        const text = el.tagName === 'BUTTON' ? el.textContent.trim() : '';
        return !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !text;
      })
      .map((el) => el.outerHTML.slice(0, 80)),
  );
  check(unlabelled.length === 0, `unlabelled controls on ${where}: ${unlabelled.join(' | ')}`);
}

async function noSideways(page, where) {
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  check(width <= 390, `${where} is ${width}px wide at 390px`);
}

async function tokensRun(context, page) {
  // Sign in: a wrong token is refused with the API's message, the right one opens the page.
  await page.goto(`${base}/ui/`);
  await ready(page, 'signin');
  await everyControlLabelled(page, 'sign-in');
  await shot(page, '01-sign-in');
  await page.getByLabel('Token').fill('engram_000000000000_wrong');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await ready(page, 'signin');
  check((await page.locator('.signin .error').textContent()).includes('not valid'), 'a wrong token is refused');
  await page.getByLabel('Token').fill(aliceToken);
  await page.keyboard.press('Enter');
  await ready(page, 'profile');
  check((await page.evaluate(() => sessionStorage.getItem('engram.token'))) === aliceToken, 'the token is kept in session storage');
  check(!page.url().includes(aliceToken), 'the token is not in the URL');

  // Profile: current entries, what they replaced, where they came from.
  const home = page.locator('li.entry', { hasText: 'home: Lisbon' });
  await home.waitFor();
  check((await home.locator('summary').textContent()).includes('Replaced 1 earlier value'), 'the profile says what an entry replaced');
  await home.locator('summary').click();
  check((await home.locator('.supersedes s').textContent()) === 'home: Berlin', 'the replaced value is shown');
  check((await home.locator('.origin a').textContent()) === 'cli:trip', 'the conversation it came from is linked');
  check((await page.locator('li.entry').count()) === 3, 'three current profile entries');
  await everyControlLabelled(page, 'profile');
  await shot(page, '02-profile');

  // Search from the URL alone: state is in the URL, so it can be shared and reloaded.
  await go(page, '?user=alice&q=lisbon', 'search');
  check((await page.getByLabel('Search').inputValue()) === 'lisbon', 'the query is read from the URL');
  const hits = page.locator('li.hit');
  check((await hits.count()) >= 2, 'lisbon finds at least two memories');
  check((await hits.first().locator('.bars dt').allTextContents()).includes('Lexical'), 'explain is drawn as bars');
  const widths = await hits.first().locator('.bar').evaluateAll((bars) => bars.map((b) => b.getBoundingClientRect().width));
  check(widths.some((w) => w > 0), 'score bars have width');
  await everyControlLabelled(page, 'search');
  await shot(page, '03-search');
  // Filters go into the URL too.
  await page.locator('details.filters summary').click();
  await page.getByLabel('fact', { exact: true }).check();
  await page.getByRole('button', { name: 'Search', exact: true }).click();
  await ready(page, 'search');
  check(new URL(page.url()).searchParams.get('kind') === 'fact', 'the kind filter is in the URL');
  const kinds = await page.locator('li.hit .kind').allTextContents();
  check(kinds.length > 0 && kinds.every((k) => k === 'fact'), `only facts: ${kinds}`);
  await page.reload();
  await ready(page, 'search');
  check((await page.getByLabel('fact', { exact: true }).isChecked()) === true, 'a reload keeps the filters');

  // Open a memory: every field.
  await page.locator('li.hit .text a').first().click();
  await ready(page, 'memory');
  const fields = await page.locator('.fields dt').allTextContents();
  for (const name of ['Id', 'User', 'Kind', 'Created', 'True from', 'Source', 'Metadata']) check(fields.includes(name), `the memory shows ${name}`);
  await shot(page, '04-memory');

  // Edit a fact on the profile, then find the old value in its history.
  await go(page, '?user=alice', 'profile');
  // Found by id: while it is edited, its text is in a text box, not in the card's text.
  const jobId = await page.locator('li.entry', { hasText: 'job: nurse' }).getAttribute('data-id');
  const job = page.locator(`li.entry[data-id="${jobId}"]`);
  await job.getByRole('button', { name: /^Edit/ }).click();
  await job.getByLabel('New text').fill('job: doctor');
  await job.getByRole('button', { name: 'Save' }).click();
  await page.locator('li.entry', { hasText: 'job: doctor' }).waitFor();
  check((await page.locator('#status').textContent()).includes('Saved'), 'saving is announced');
  await page.locator('li.entry', { hasText: 'job: doctor' }).getByRole('link', { name: 'History' }).click();
  await ready(page, 'memory');
  const diff = page.locator('.history .event-update .diff');
  check((await diff.locator('del').textContent()).includes('nurse'), 'the history shows the old value');
  check((await diff.locator('ins').textContent()).includes('doctor'), 'the history shows the new value');
  await shot(page, '05-history-diff');

  // Delete asks first (and Cancel keeps it); invalidate after confirming.
  await go(page, '?user=alice', 'profile');
  const tea = page.locator('li.entry', { hasText: 'tea over coffee' });
  await tea.getByRole('button', { name: /^Delete/ }).click();
  const dialog = page.locator('dialog#confirm');
  await dialog.waitFor({ state: 'visible' });
  check((await dialog.textContent()).includes('Delete “tea over coffee”'), 'delete asks first');
  await shot(page, '06-confirm-delete');
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  check((await page.locator('li.entry', { hasText: 'tea over coffee' }).count()) === 1, 'cancel keeps the memory');
  await tea.getByRole('button', { name: /^Invalidate/ }).click();
  await dialog.getByRole('button', { name: 'Invalidate' }).click();
  await page.locator('li.entry', { hasText: 'tea over coffee' }).waitFor({ state: 'detached' });
  check((await page.locator('li.entry').count()) === 2, 'the invalidated entry leaves the profile');

  // Timeline: a histogram per day and kind; choosing a day shows that day.
  await go(page, '?user=alice&view=timeline', 'timeline');
  const days = page.locator('svg.histogram a.day');
  check((await days.count()) >= 3, 'the histogram has a bar per day with memories');
  await shot(page, '07-timeline');
  const label = await days.first().getAttribute('aria-label');
  await days.first().click();
  await ready(page, 'timeline');
  const day = new URL(page.url()).searchParams.get('day');
  check(day && label.startsWith(day), `the chosen day is in the URL (${day})`);
  check((await page.locator('h3', { hasText: `On ${day}` }).count()) === 1, 'the day is shown');
  check((await page.locator('.day-group li').count()) >= 1, 'the day lists its memories');
  await shot(page, '08-timeline-day');

  // Knowledge graph: a picture; click an entity to see its observations; pan and zoom.
  await go(page, '?user=alice&view=graph', 'graph');
  check((await page.locator('svg.graph .node').count()) === 3, 'three entities drawn');
  await page.locator('svg.graph .node', { hasText: 'Alice' }).click();
  check((await page.locator('.entity-panel').textContent()).includes('plays the cello'), 'an entity shows its observations');
  check(new URL(page.url()).searchParams.get('entity') === 'Alice', 'the entity is in the URL');
  await shot(page, '09-graph');
  const scene = page.locator('svg.graph > g');
  const before = await scene.getAttribute('transform');
  await page.getByRole('button', { name: 'Zoom in' }).click();
  const zoomed = await scene.getAttribute('transform');
  check(zoomed !== before && zoomed.includes('scale(1.25)'), `zoom changes the view (${zoomed})`);
  await page.locator('svg.graph').focus();
  await page.keyboard.press('ArrowLeft');
  check((await scene.getAttribute('transform')) !== zoomed, 'arrow keys pan');
  await page.locator('svg.graph .node', { hasText: 'Bob' }).focus();
  await page.keyboard.press('Enter');
  check((await page.locator('.entity-panel h3').textContent()) === 'Bob', 'an entity opens from the keyboard');

  // Sessions: the list, and one conversation with its tool calls folded.
  await go(page, '?user=alice&view=sessions', 'sessions');
  await page.getByRole('link', { name: 'cli:trip' }).click();
  await ready(page, 'sessions');
  check((await page.locator('.conversation .role-user').count()) === 2, 'the user messages are shown');
  const call = page.locator('details.tool-call').first();
  check((await call.getAttribute('open')) === null, 'tool calls are folded');
  check((await call.locator('summary').textContent()).includes('recall'), 'the tool call is named');
  await call.locator('summary').click();
  check((await call.locator('pre').textContent()).includes('"query"'), 'a tool call unfolds to its arguments');
  await shot(page, '10-session');

  // Import a file, then export.
  await go(page, '?user=alice&view=transfer', 'transfer');
  await page.getByLabel('JSONL file').setInputFiles(importFile);
  await page.getByRole('button', { name: 'Import' }).click();
  await page.locator('[role=status]', { hasText: 'Imported' }).waitFor();
  const summary = await page.locator('[role=status]', { hasText: 'Imported' }).textContent();
  check(summary.includes('Imported 2 memories') && summary.includes('1 rejected'), `import summary: ${summary}`);
  check(summary.includes('line 3'), 'the rejected line is named');
  await everyControlLabelled(page, 'import');
  await shot(page, '11-import');
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /^Download/ }).click()]);
  const exported = readFileSync(await download.path(), 'utf8').trim().split('\n');
  check(download.suggestedFilename() === 'engram-alice.jsonl', 'the export is named for the user');
  check(exported.length >= 12 && exported.every((l) => JSON.parse(l).user_id === 'alice'), `the export holds alice's memories (${exported.length})`);
  const imported = await page.evaluate(async (token) => {
    const r = await fetch('/v1/memories/search', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ user_id: 'alice', query: 'marathon' }),
    });
    return (await r.json()).results.length;
  }, aliceToken);
  check(imported === 1, 'the imported memory is searchable');

  // The keyboard reaches the navigation from the top of the page.
  await go(page, '?user=alice', 'profile');
  let reached = false;
  for (let i = 0; i < 8 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement?.closest('nav#nav') !== null);
  }
  check(reached, 'Tab reaches the navigation');
  await page.keyboard.press('Enter');
  await ready(page, 'profile');

  // 390 px wide: nothing runs off the side.
  await page.setViewportSize({ width: 390, height: 844 });
  for (const [query, view] of [
    ['?user=alice', 'profile'],
    ['?user=alice&q=lisbon', 'search'],
    ['?user=alice&view=timeline', 'timeline'],
    ['?user=alice&view=graph', 'graph'],
    ['?user=alice&view=sessions&session=cli%3Atrip', 'sessions'],
  ]) {
    await go(page, query, view);
    await noSideways(page, view);
  }
  await go(page, '?user=alice', 'profile');
  await shot(page, '12-profile-390px');
  await page.setViewportSize({ width: 1280, height: 900 });

  // Bob's token cannot see alice: not in the list, and asking for her is refused.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await ready(page, 'signin');
  await page.getByLabel('Token').fill(bobToken);
  await page.keyboard.press('Enter');
  await ready(page, 'profile');
  const users = await page.locator('#user option').allTextContents();
  check(users.length === 1 && users[0].startsWith('bob'), `bob sees only bob: ${users}`);
  check((await page.locator('li.entry').count()) === 0 || !(await page.locator('main').textContent()).includes('Lisbon'), 'bob sees none of alice');
  await go(page, '?user=alice', 'error');
  check((await page.locator('.error').textContent()).includes("may not touch the memories of user 'alice'"), 'alice is refused to bob');
  await go(page, '?user=alice&q=lisbon', 'error');
  await shot(page, '13-bob-refused');
}

async function localRun(page) {
  // Loopback and no token at all: no sign-in.
  await page.goto(`${base}/ui/`);
  await ready(page, 'profile');
  check((await page.locator('#token').count()) === 0, 'no sign-in without tokens');
  check((await page.getByRole('button', { name: 'Sign out' }).count()) === 0, 'nothing to sign out of');
  check((await page.locator('li.entry').count()) === 1, 'the only user is opened');
  await shot(page, '14-local-no-sign-in');
}

const profile = mkdtempSync(join(tmpdir(), 'engram-chromium-'));
mkdirSync(shots, { recursive: true });
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: FLAGS,
  acceptDownloads: true,
  viewport: { width: 1280, height: 900 },
});
const problems = [];
const outside = [];
try {
  // The page must work with no internet: anything not from this server is refused and noted.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(base) || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
    outside.push(url);
    return route.abort();
  });
  const page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // 401/403/404 answers are part of the tests; the browser logs them as failed loads.
    if (m.type() === 'error' && !/status of 40[134]/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  if (mode === 'tokens') await tokensRun(context, page);
  else if (mode === 'local') await localRun(page);
  else throw new Error(`unknown mode ${mode}`);
  check(outside.length === 0, `requests outside the server: ${outside.join(', ')}`);
  check(problems.length === 0, problems.join('\n'));
} catch (e) {
  console.error(e.stack || String(e));
  try {
    const page = context.pages()[0];
    if (page) await shot(page, `failure-${mode}`);
  } catch {}
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  console.error(`screenshots: ${shots}`);
  process.exit(1);
}
await context.close();
rmSync(profile, { recursive: true, force: true });
console.log(JSON.stringify({ mode, checks, screenshots }));
