"""Drives engram's MCP server with the official MCP Python SDK and checks what it answers.

Usage:
  python drive_engram.py stdio ENGRAM_BINARY ENGRAM_HOME USER
      (starts `engram mcp` with no arguments, as clients configure the reference memory server:
      the home and the login name come from the environment)
  python drive_engram.py http URL TOKEN

Exits 0 when every check passed; otherwise prints the failed check to stderr and exits 1.
Prints one JSON line with what was seen (tool names, ids) on success.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

GRAPH_TOOLS = {
    "create_entities", "create_relations", "add_observations", "delete_entities",
    "delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes",
}
MEMORY_TOOLS = {
    "memory_add", "memory_search", "memory_get", "memory_list", "memory_update",
    "memory_delete", "memory_history",
}


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


async def call(session, name, arguments, expect_error=False):
    result = await session.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    if expect_error:
        check(result.is_error, f"{name} should fail but answered {text}")
        return text
    check(not result.is_error, f"{name}({json.dumps(arguments)}) failed: {text}")
    check(result.structured_content is not None, f"{name} gave no structured content")
    return result.structured_content


async def scenario(session):
    seen = {}
    init = await session.initialize()
    check(init.server_info.name == "engram", f"server name is {init.server_info.name}")

    tools = await session.list_tools()
    names = {tool.name for tool in tools.tools}
    check(GRAPH_TOOLS <= names, f"missing graph tools: {GRAPH_TOOLS - names}")
    check(MEMORY_TOOLS <= names, f"missing memory tools: {MEMORY_TOOLS - names}")
    by_name = {tool.name: tool for tool in tools.tools}
    check(by_name["create_entities"].input_schema["required"] == ["entities"], "create_entities schema")
    check(len(by_name["memory_search"].description) > 80, "memory_search needs a real description")
    seen["tools"] = sorted(names)

    # Memory tools.
    added = await call(session, "memory_add", {"text": "Alice prefers tabs over spaces in Python", "kind": "preference"})
    check(added["status"] == "added", f"memory_add: {added}")
    memory_id = added["id"]
    again = await call(session, "memory_add", {"text": "Alice prefers tabs over spaces in Python"})
    check(again == {"status": "duplicate", "id": memory_id}, f"duplicate add: {again}")
    await call(session, "memory_add", {"text": "Alice went hiking in the Alps last summer", "kind": "episode"})

    found = await call(session, "memory_search", {"query": "python indentation tabs"})
    check(found["results"] and found["results"][0]["id"] == memory_id, f"memory_search: {found}")
    check("score" in found["results"][0], "hits carry a score")

    got = await call(session, "memory_get", {"id": memory_id})
    check(got["text"] == "Alice prefers tabs over spaces in Python", f"memory_get: {got}")

    listed = await call(session, "memory_list", {"limit": 1})
    check(len(listed["memories"]) == 1 and listed["next_offset"] == 1, f"memory_list: {listed}")

    updated = await call(session, "memory_update", {"id": memory_id, "text": "Alice now prefers spaces in Python"})
    check(updated["text"] == "Alice now prefers spaces in Python", f"memory_update: {updated}")

    await call(session, "memory_delete", {"id": memory_id})
    history = await call(session, "memory_history", {"id": memory_id})
    events = [event["event"] for event in history["events"]]
    check(events == ["add", "update", "delete"], f"memory_history: {events}")
    error = await call(session, "memory_get", {"id": memory_id}, expect_error=True)
    check("no memory with id" in error, f"memory_get of a deleted memory: {error}")
    error = await call(session, "memory_add", {"text": "x", "colour": "red"}, expect_error=True)
    check("unknown field" in error, f"unknown argument: {error}")

    # The reference server's knowledge-graph tools, same argument shapes.
    created = await call(session, "create_entities", {"entities": [
        {"name": "Alice", "entityType": "person", "observations": ["works at Acme", "speaks French"]},
        {"name": "Acme", "entityType": "company", "observations": ["makes anvils"]},
        {"name": "Bob", "entityType": "person", "observations": ["drinks coffee every morning"]},
    ]})
    check([e["name"] for e in created["entities"]] == ["Alice", "Acme", "Bob"], f"create_entities: {created}")
    again = await call(session, "create_entities", {"entities": [{"name": "Alice", "entityType": "person", "observations": []}]})
    check(again["entities"] == [], "existing entities are not created again")

    relations = await call(session, "create_relations", {"relations": [
        {"from": "Alice", "to": "Acme", "relationType": "works_at"},
        {"from": "Bob", "to": "Alice", "relationType": "knows"},
    ]})
    check(len(relations["relations"]) == 2, f"create_relations: {relations}")

    added = await call(session, "add_observations", {"observations": [
        {"entityName": "Alice", "contents": ["plays the cello", "speaks French"]},
    ]})
    check(added["results"] == [{"entityName": "Alice", "addedObservations": ["plays the cello"]}], f"add_observations: {added}")
    error = await call(session, "add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x"]}]}, expect_error=True)
    check("Entity with name Nobody not found" in error, f"add_observations to a missing entity: {error}")

    found = await call(session, "search_nodes", {"query": "who plays an instrument like the cello"})
    check(found["entities"] and found["entities"][0]["name"] == "Alice", f"search_nodes ranking: {found}")
    check(found["entities"][0]["observations"][0] == "plays the cello", f"matching observations first: {found}")
    check({"from": "Alice", "to": "Acme", "relationType": "works_at"} in found["relations"], "relations of found nodes")
    found = await call(session, "search_nodes", {"query": "coffee"})
    check([e["name"] for e in found["entities"]] == ["Bob"], f"search_nodes coffee: {found}")

    opened = await call(session, "open_nodes", {"names": ["Acme"]})
    check(opened["entities"] == [{"name": "Acme", "entityType": "company", "observations": ["makes anvils"]}], f"open_nodes: {opened}")
    check(opened["relations"] == [{"from": "Alice", "to": "Acme", "relationType": "works_at"}], f"open_nodes relations: {opened}")

    await call(session, "delete_observations", {"deletions": [{"entityName": "Alice", "observations": ["speaks French"]}]})
    await call(session, "delete_relations", {"relations": [{"from": "Bob", "to": "Alice", "relationType": "knows"}]})
    deleted = await call(session, "delete_entities", {"entityNames": ["Acme"]})
    check(deleted == {"success": True, "message": "Entities deleted successfully"}, f"delete_entities: {deleted}")

    graph = await call(session, "read_graph", {})
    check([e["name"] for e in graph["entities"]] == ["Alice", "Bob"], f"read_graph entities: {graph}")
    resources = await session.list_resources()
    check([str(r.uri) for r in resources.resources] == ["memory://knowledge-graph"], f"resources: {resources}")
    read = await session.read_resource("memory://knowledge-graph")
    check(json.loads(read.contents[0].text) == graph, f"the resource is the graph: {read}")
    check(graph["entities"][0]["observations"] == ["works at Acme", "plays the cello"], f"read_graph observations: {graph}")
    check(graph["relations"] == [], f"relations went with their entities: {graph}")
    seen["graph"] = graph
    return seen


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        binary, home, user = sys.argv[2:5]
        params = StdioServerParameters(command=binary, args=["mcp"], env={"ENGRAM_HOME": home, "USER": user})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await scenario(session)
    if mode == "http":
        url, token = sys.argv[2:4]
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    return await scenario(session)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    try:
        seen = asyncio.run(main())
    except CheckFailed as failure:
        print(f"check failed: {failure}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(seen))
