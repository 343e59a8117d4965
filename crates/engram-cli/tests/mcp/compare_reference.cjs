// Starts `engram mcp` (no arguments, as MCP clients configure the reference memory server) and
// the reference MCP memory server (@modelcontextprotocol/server-memory) with the official MCP
// TypeScript SDK, and checks that engram offers what the reference offers: every tool with the
// same title, annotations, required arguments and output schema, the memory://knowledge-graph
// resource with its subscription, and the same answers to the same calls. The SDK itself
// validates every structured answer against the tool's output schema.
//
// Usage: node compare_reference.cjs ENGRAM_BINARY ENGRAM_HOME USER REFERENCE_DIR
//   (NODE_PATH must name the node_modules of scripts/setup-node-clients.sh)
// Exits 0 when every check passed and prints one JSON line with what was seen; otherwise prints
// the failed check to stderr and exits 1.
"use strict";

const path = require("path");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { ResourceUpdatedNotificationSchema } = require("@modelcontextprotocol/sdk/types.js");

class CheckFailed extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

async function connect(name, command, args, env) {
  const transport = new StdioClientTransport({ command, args, env, stderr: "inherit" });
  const client = new Client({ name: `engram-test-${name}`, version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// The parts of a schema that say what a client may rely on: properties and what is required,
// recursively (zod and engram spell the rest, such as $schema or descriptions, differently).
function shape(schema) {
  if (!schema || typeof schema !== "object") return schema;
  const out = {};
  if (schema.type) out.type = schema.type;
  if (schema.properties) {
    out.properties = {};
    for (const key of Object.keys(schema.properties).sort()) {
      out.properties[key] = shape(schema.properties[key]);
    }
  }
  if (schema.required) out.required = [...schema.required].sort();
  if (schema.items) out.items = shape(schema.items);
  return out;
}

// The input properties the reference takes must be taken by engram too, with the same types;
// engram may take more (user_id, limit) as long as none of them is required.
function checkInput(name, reference, engram) {
  const ref = shape(reference);
  const ours = shape(engram);
  check(same(ref.required || [], ours.required || []), `${name}: required arguments differ: ${JSON.stringify(ref.required)} vs ${JSON.stringify(ours.required)}`);
  for (const [key, value] of Object.entries(ref.properties || {})) {
    check(ours.properties && key in ours.properties, `${name}: engram does not take ${key}`);
    check(same(value, ours.properties[key]), `${name}.${key}: ${JSON.stringify(value)} vs ${JSON.stringify(ours.properties[key])}`);
  }
}

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  check(!result.isError, `${name}(${JSON.stringify(args)}) failed: ${JSON.stringify(result.content)}`);
  return result;
}

// The same calls, in order, to both servers; search_nodes is left out (engram ranks and trims
// observations on purpose) and checked on its own below.
const SCRIPT = [
  ["create_entities", { entities: [
    { name: "Alice", entityType: "person", observations: ["works at Acme", "speaks French"] },
    { name: "Acme", entityType: "company", observations: ["makes anvils"] },
    { name: "Bob", entityType: "person", observations: ["drinks coffee every morning"] },
  ] }],
  ["create_entities", { entities: [{ name: "Alice", entityType: "person", observations: [] }] }],
  ["create_relations", { relations: [
    { from: "Alice", to: "Acme", relationType: "works_at" },
    { from: "Bob", to: "Alice", relationType: "knows" },
  ] }],
  ["create_relations", { relations: [{ from: "Alice", to: "Acme", relationType: "works_at" }] }],
  ["add_observations", { observations: [{ entityName: "Alice", contents: ["plays the cello", "speaks French"] }] }],
  ["open_nodes", { names: ["Acme", "Nobody"] }],
  ["read_graph", {}],
  ["delete_observations", { deletions: [{ entityName: "Alice", observations: ["speaks French"] }] }],
  ["delete_relations", { relations: [{ from: "Bob", to: "Alice", relationType: "knows" }] }],
  ["delete_entities", { entityNames: ["Acme"] }],
  ["read_graph", {}],
];

async function main() {
  const [binary, home, user, referenceDir] = process.argv.slice(2);
  const referenceEntry = require.resolve("@modelcontextprotocol/server-memory/dist/index.js");
  // Exactly the configuration MCP clients use for the reference server, with engram's name.
  const engram = await connect("engram", binary, ["mcp"], {
    PATH: process.env.PATH,
    ENGRAM_HOME: home,
    USER: user,
    ENGRAM_LOG: "warn",
  });
  const reference = await connect("reference", process.execPath, [referenceEntry], {
    PATH: process.env.PATH,
    MEMORY_FILE_PATH: path.join(referenceDir, "memory.jsonl"),
  });
  const seen = {};
  try {
    check(engram.getServerVersion().name === "engram", `server name ${engram.getServerVersion().name}`);
    check(engram.getServerCapabilities().resources?.subscribe === true, "engram offers resource subscriptions");

    // Tools: the reference's set, with the same titles, annotations and schemas.
    const refTools = (await reference.listTools()).tools;
    const ourTools = new Map((await engram.listTools()).tools.map((t) => [t.name, t]));
    check(refTools.length === 9, `the reference has ${refTools.length} tools`);
    for (const ref of refTools) {
      const ours = ourTools.get(ref.name);
      check(ours, `engram lacks the tool ${ref.name}`);
      check(ours.title === ref.title, `${ref.name}: title ${ours.title} vs ${ref.title}`);
      check(same(ours.annotations, ref.annotations), `${ref.name}: annotations ${JSON.stringify(ours.annotations)} vs ${JSON.stringify(ref.annotations)}`);
      check(same(shape(ours.outputSchema), shape(ref.outputSchema)), `${ref.name}: output schema ${JSON.stringify(shape(ours.outputSchema))} vs ${JSON.stringify(shape(ref.outputSchema))}`);
      checkInput(ref.name, ref.inputSchema, ours.inputSchema);
    }
    seen.tools = [...ourTools.keys()].sort();

    // The resource: listed alike, read alike, and subscribers hear of changes.
    const refResources = (await reference.listResources()).resources;
    const ourResources = (await engram.listResources()).resources;
    check(same(ourResources, refResources), `resources ${JSON.stringify(ourResources)} vs ${JSON.stringify(refResources)}`);
    const updates = [];
    engram.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));
    await engram.subscribeResource({ uri: "memory://knowledge-graph" });

    // The same calls, the same answers.
    for (const [name, args] of SCRIPT) {
      const refResult = await call(reference, name, args);
      const ourResult = await call(engram, name, args);
      check(same(ourResult.structuredContent, refResult.structuredContent), `${name}(${JSON.stringify(args)}): engram ${JSON.stringify(ourResult.structuredContent)} vs reference ${JSON.stringify(refResult.structuredContent)}`);
      check(same(ourResult.content, refResult.content), `${name}: text ${JSON.stringify(ourResult.content)} vs ${JSON.stringify(refResult.content)}`);
    }
    const refGraph = await reference.readResource({ uri: "memory://knowledge-graph" });
    const ourGraph = await engram.readResource({ uri: "memory://knowledge-graph" });
    check(same(ourGraph, refGraph), `resource contents ${JSON.stringify(ourGraph)} vs ${JSON.stringify(refGraph)}`);
    seen.graph = JSON.parse(ourGraph.contents[0].text);
    // Eight of the calls changed the graph; the notifications may still be in flight.
    for (let i = 0; i < 50 && updates.length < 8; i++) await new Promise((r) => setTimeout(r, 20));
    check(updates.length === 8 && updates.every((u) => u === "memory://knowledge-graph"), `resource updates: ${JSON.stringify(updates)}`);
    seen.updates = updates.length;

    // Errors are tool errors, worded as the reference words them.
    const missing = await engram.callTool({ name: "add_observations", arguments: { observations: [{ entityName: "Nobody", contents: ["x"] }] } });
    check(missing.isError && missing.content[0].text.includes("Entity with name Nobody not found"), `missing entity: ${JSON.stringify(missing)}`);
    check(missing._meta && missing._meta["engram/error"].code === "not_found", `stable error code: ${JSON.stringify(missing)}`);
    let refused = null;
    try {
      await engram.readResource({ uri: "memory://elsewhere" });
    } catch (e) {
      refused = e;
    }
    check(refused !== null, "an unknown resource is refused");

    // search_nodes: engram ranks by relevance where the reference matches one substring.
    const found = await call(engram, "search_nodes", { query: "who plays an instrument like the cello" });
    check(found.structuredContent.entities[0]?.name === "Alice", `search_nodes: ${JSON.stringify(found.structuredContent)}`);
    const refFound = await call(reference, "search_nodes", { query: "who plays an instrument like the cello" });
    seen.reference_search_hits = refFound.structuredContent.entities.length;
  } finally {
    await engram.close();
    await reference.close();
  }
  return seen;
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
