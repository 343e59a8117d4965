// Drives `engram serve` with Mem0's own TypeScript client (npm `mem0ai`), unchanged, and
// checks what it answers.
//
// Usage: node drive_node.cjs URL TOKEN OTHER_TOKEN USER   (NODE_PATH: scripts/setup-node-clients.sh)
// TOKEN is bound to USER, OTHER_TOKEN to another user; the server's model is the scripted one,
// primed for one extraction. Exits 0 and prints one JSON line when every check passed;
// otherwise prints the failed check to stderr and exits 1.
"use strict";

const { MemoryClient, MemoryNotFoundError, AuthenticationError, ValidationError } = require("mem0ai");

class CheckFailed extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

async function expect(errorType, call, what) {
  let answer;
  try {
    answer = await call();
  } catch (e) {
    if (e instanceof errorType) return e;
    throw new CheckFailed(`${what}: expected ${errorType.name}, got ${e && e.name}: ${e && e.message}`);
  }
  throw new CheckFailed(`${what}: expected ${errorType.name}, got ${JSON.stringify(answer)}`);
}

async function main() {
  const [url, token, otherToken, user] = process.argv.slice(2);
  const client = new MemoryClient({ apiKey: token, host: url });
  const other = new MemoryClient({ apiKey: otherToken, host: url });
  await client.ping();

  const conversation = [
    { role: "user", content: "I grow tomatoes and basil on my balcony." },
    { role: "assistant", content: "Lovely. Do you use any fertiliser?" },
    { role: "user", content: "Only compost from my kitchen scraps." },
  ];
  const added = await client.add(conversation, { user_id: user, run_id: "garden", metadata: { source: "chat" }, infer: false });
  check(added.status === "SUCCEEDED" && added.eventId, `add answer: ${JSON.stringify(added)}`);
  check(added.results.length === 3 && added.results.every((r) => r.event === "ADD"), `add results: ${JSON.stringify(added.results)}`);
  const tomatoId = added.results[0].id;
  await client.add([{ role: "user", content: "I water the plants every evening." }], { user_id: user, agent_id: "gardener", infer: false });

  const inferred = await client.add(
    [
      { role: "user", content: "I switched from Python to Rust for my side projects." },
      { role: "assistant", content: "Nice. What are you building?" },
      { role: "user", content: "A command-line tool that keeps my running log." },
      { role: "assistant", content: "That sounds useful." },
    ],
    { user_id: user },
  );
  check(inferred.results.some((r) => r.memory.includes("Rust")), `infer: ${JSON.stringify(inferred)}`);

  const listed = await client.getAll({ filters: { user_id: user } });
  check(listed.count === 4 + inferred.results.length, `getAll: ${JSON.stringify(listed)}`);
  const paged = await client.getAll({ filters: { user_id: user }, page: 1, pageSize: 2 });
  check(paged.results.length === 2 && paged.next, `paged: ${JSON.stringify(paged)}`);

  const found = await client.search("tomatoes balcony", { filters: { user_id: user }, topK: 3 });
  check(found.results[0] && found.results[0].id === tomatoId, `search: ${JSON.stringify(found)}`);
  check(typeof found.results[0].score === "number", "hits carry a score");
  const filtered = await client.search("plants", {
    filters: { AND: [{ user_id: user }, { OR: [{ agent_id: "gardener" }, { run_id: "garden" }] }, { NOT: { keywords: { icontains: "COMPOST" } } }] },
  });
  check(filtered.results.length >= 1 && filtered.results.every((r) => !r.memory.includes("compost")), `AND/OR/NOT: ${JSON.stringify(filtered)}`);
  const byMeta = await client.search("tomatoes", { filters: { user_id: user, metadata: { source: "chat" } } });
  check(byMeta.results.every((r) => r.metadata && r.metadata.source === "chat"), `metadata filter: ${JSON.stringify(byMeta)}`);

  const got = await client.get(tomatoId);
  check(got.memory === conversation[0].content && got.userId === user && got.runId === "garden", `get: ${JSON.stringify(got)}`);
  const updated = await client.update(tomatoId, { text: "I grow tomatoes, basil and mint on my balcony." });
  check(updated.memory.includes("mint"), `update: ${JSON.stringify(updated)}`);
  const history = await client.history(tomatoId);
  check(history.map((h) => h.event).join() === "ADD,UPDATE", `history: ${JSON.stringify(history)}`);
  check(history[1].oldMemory === conversation[0].content, `history old text: ${JSON.stringify(history)}`);

  await expect(MemoryNotFoundError, () => other.get(tomatoId), "another user's get");
  await expect(MemoryNotFoundError, () => other.update(tomatoId, { text: "x" }), "another user's update");
  await expect(MemoryNotFoundError, () => other.delete(tomatoId), "another user's delete");
  await expect(AuthenticationError, () => other.search("tomatoes", { filters: { user_id: user } }), "another user's search");
  await expect(ValidationError, () => client.search("tomatoes", { filters: { user_id: user, colour: "red" } }), "unknown filter key");
  await expect(MemoryNotFoundError, () => client.get("42"), "an id that is not a UUID");

  const ids = (await client.getAll({ filters: { AND: [{ user_id: user }, { run_id: "garden" }] } })).results.map((m) => m.id);
  const batch = await client.batchUpdate([{ memoryId: ids[0], text: "Uses kitchen compost as fertiliser." }]);
  check(batch.message.includes("1"), `batchUpdate: ${JSON.stringify(batch)}`);
  const removed = await client.batchDelete([ids[1]]);
  check(removed.message.includes("1"), `batchDelete: ${JSON.stringify(removed)}`);
  await expect(MemoryNotFoundError, () => client.get(ids[1]), "batch-deleted memory");

  const deleted = await client.delete(tomatoId);
  check(/deleted/i.test(deleted.message), `delete: ${JSON.stringify(deleted)}`);
  await expect(MemoryNotFoundError, () => client.get(tomatoId), "deleted memory");
  const all = await client.deleteAll({ userId: user });
  check(/deleted/i.test(all.message), `deleteAll: ${JSON.stringify(all)}`);
  check((await client.getAll({ filters: { user_id: user } })).count === 0, "deleteAll left memories");
  return { ok: true, inferred: inferred.results.map((r) => r.memory) };
}

main().then(
  (seen) => {
    console.log(JSON.stringify(seen));
    process.exit(0);
  },
  (error) => {
    console.error(error instanceof CheckFailed ? `check failed: ${error.message}` : error);
    process.exit(1);
  },
);
