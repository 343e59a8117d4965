"""Drives `engram serve` with Mem0's own Python client (PyPI `mem0ai`), unchanged, and checks
what it answers.

Usage: python drive_python.py URL TOKEN OTHER_TOKEN USER

TOKEN is bound to USER, OTHER_TOKEN to another user. The server's model is the scripted one,
primed for one extraction. Exits 0 when every check passed and prints one JSON line with what
was seen; otherwise prints the failed check to stderr and exits 1.
"""

import json
import sys

import httpx
from mem0 import MemoryClient
from mem0.exceptions import AuthenticationError, MemoryError, MemoryNotFoundError, ValidationError


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def expect(error_type, call, what):
    try:
        answer = call()
    except error_type as e:
        return e
    except Exception as e:  # noqa: BLE001 - the wrong kind of error is a failed check
        raise CheckFailed(f"{what}: expected {error_type.__name__}, got {type(e).__name__}: {e}")
    raise CheckFailed(f"{what}: expected {error_type.__name__}, got {answer}")


def main():
    url, token, other_token, user = sys.argv[1:5]
    seen = {}
    client = MemoryClient(api_key=token, host=url)
    other = MemoryClient(api_key=other_token, host=url)
    expect(ValueError, lambda: MemoryClient(api_key="engram_0000_wrong", host=url), "a wrong key")

    # A conversation stored verbatim (infer=False), with metadata and a run.
    conversation = [
        {"role": "user", "content": "I am training for the Berlin marathon in September."},
        {"role": "assistant", "content": "Great, how many kilometres do you run a week?"},
        {"role": "user", "content": "About fifty, mostly along the river Spree."},
    ]
    added = client.add(conversation, user_id=user, run_id="run-1", metadata={"source": "chat", "week": 3}, infer=False)
    check(added["status"] == "SUCCEEDED" and added["event_id"], f"add answer: {added}")
    results = added["results"]
    check([r["event"] for r in results] == ["ADD", "ADD", "ADD"], f"add results: {results}")
    check(results[0]["memory"] == conversation[0]["content"], f"add stores verbatim: {results}")
    marathon_id = results[0]["id"]
    event = client.client.get(f"/v1/event/{added['event_id']}/").json()
    check(event["status"] == "SUCCEEDED" and len(event["results"]) == 3, f"event: {event}")
    hidden = other.client.get(f"/v1/event/{added['event_id']}/")
    check(hidden.status_code == 404, f"another user's event: {hidden.status_code}")

    client.add("I keep my running shoes by the door.", user_id=user, agent_id="coach", metadata={"source": "note"}, infer=False)
    client.add([{"role": "user", "content": "My cat is called Miso."}], user_id=user, app_id="home", infer=False)

    # infer=True: extraction by the server's model, merged into the user's memory.
    inferred = client.add(
        [
            {"role": "user", "content": "I switched from Python to Rust for my side projects."},
            {"role": "assistant", "content": "Nice. What are you building?"},
            {"role": "user", "content": "A command-line tool that keeps my running log."},
            {"role": "assistant", "content": "That sounds useful for marathon training."},
        ],
        user_id=user,
        metadata={"source": "inferred"},
    )
    texts = sorted(r["memory"] for r in inferred["results"])
    check(any("Rust" in t for t in texts), f"infer=True results: {inferred}")
    seen["inferred"] = texts

    # Listing (get_all) with filters, paged.
    listed = client.get_all(filters={"user_id": user})
    check(listed["count"] == 5 + len(texts), f"get_all count: {listed['count']} {listed}")
    first = listed["results"][0]
    for key in ("id", "memory", "user_id", "metadata", "categories", "created_at", "updated_at"):
        check(key in first, f"get_all item lacks {key}: {first}")
    page = client.get_all(filters={"user_id": user}, page=2, page_size=2)
    check(len(page["results"]) == 2 and page["previous"] and page["next"], f"page 2: {page}")
    in_run = client.get_all(filters={"AND": [{"user_id": user}, {"run_id": "run-1"}]})
    check(in_run["count"] == 3, f"run filter: {in_run}")
    app = client.get_all(filters={"user_id": user, "app_id": "home"})
    check([m["memory"] for m in app["results"]] == ["My cat is called Miso."], f"app filter: {app}")
    check(app["results"][0]["app_id"] == "home", f"app_id lifted: {app}")

    # Search with the filter language.
    found = client.search("marathon training", filters={"user_id": user}, top_k=3)
    check(found["results"] and found["results"][0]["id"] == marathon_id, f"search: {found}")
    check(isinstance(found["results"][0]["score"], float), "hits carry a score")
    meta = client.search("running", filters={"AND": [{"user_id": user}, {"metadata": {"source": "note"}}]})
    check([m["memory"] for m in meta["results"]] == ["I keep my running shoes by the door."], f"metadata filter: {meta}")
    either = client.search("running kilometres shoes", filters={"OR": [{"agent_id": "coach"}, {"run_id": "run-1"}], "user_id": user}, top_k=10)
    check(len(either["results"]) >= 2 and all(r["agent_id"] == "coach" or r["run_id"] == "run-1" for r in either["results"]), f"OR filter: {either}")
    negated = client.search("running", filters={"AND": [{"user_id": user}, {"NOT": {"agent_id": "coach"}}]})
    check(all(r["agent_id"] != "coach" for r in negated["results"]), f"NOT filter: {negated}")
    ranged = client.search("marathon", filters={"user_id": {"in": [user]}, "created_at": {"gte": "2000-01-01", "lt": "2999-01-01T00:00:00Z"}, "metadata": {"week": {"gte": 3}}})
    check(ranged["results"] and ranged["results"][0]["id"] == marathon_id, f"in/gte/lt: {ranged}")
    keyword = client.get_all(filters={"AND": [{"user_id": user}, {"keywords": {"icontains": "SPREE"}}]})
    check(keyword["count"] == 1, f"icontains: {keyword}")
    wildcard = client.get_all(filters={"AND": [{"user_id": user}, {"agent_id": "*"}]})
    check(wildcard["count"] == 1, f"wildcard: {wildcard}")
    expect(ValidationError, lambda: client.search("x", filters={"user_id": user, "bogus": 1}), "unknown filter key")
    expect(ValidationError, lambda: client.search("x", filters={"metadata": {"a": "b"}}), "no scope in filters")

    # One memory: get, update, history, delete.
    got = client.get(marathon_id)
    check(got["memory"] == conversation[0]["content"] and got["user_id"] == user and got["run_id"] == "run-1", f"get: {got}")
    check(got["metadata"] == {"source": "chat", "week": 3, "role": "user"}, f"metadata kept: {got}")
    updated = client.update(marathon_id, text="I am training for the Berlin marathon on 21 September.")
    check(updated["memory"].endswith("21 September."), f"update: {updated}")
    client.update(marathon_id, metadata={"source": "chat", "checked": True})
    history = client.history(marathon_id)
    check([h["event"] for h in history] == ["ADD", "UPDATE", "UPDATE"], f"history: {history}")
    check(history[1]["old_memory"] == conversation[0]["content"], f"history old text: {history}")

    # Isolation: the other user's token sees none of it, through every route.
    expect(MemoryNotFoundError, lambda: other.get(marathon_id), "another user's get")
    expect(MemoryNotFoundError, lambda: other.update(marathon_id, text="hijacked"), "another user's update")
    expect(MemoryNotFoundError, lambda: other.history(marathon_id), "another user's history")
    expect(MemoryNotFoundError, lambda: other.delete(marathon_id), "another user's delete")
    expect(AuthenticationError, lambda: other.search("marathon", filters={"user_id": user}), "another user's search")
    expect(AuthenticationError, lambda: other.get_all(filters={"user_id": user}), "another user's list")
    expect(MemoryNotFoundError, lambda: other.batch_delete([{"memory_id": marathon_id}]), "another user's batch delete")
    check(client.get(marathon_id)["memory"].endswith("21 September."), "nothing changed by the other user")

    # Bad input: 4xx with a stable code, nothing changed.
    expect(MemoryNotFoundError, lambda: client.get("not-a-uuid"), "an id that is not a UUID")
    bad = client.client.post("/v3/memories/search/", json={"query": "x", "filters": {"user_id": user}, "top_k": "ten"})
    check(bad.status_code == 400 and bad.json()["code"] == "invalid_request", f"wrong type: {bad.status_code} {bad.text}")
    bad = client.client.post("/v3/memories/add/", json={"messages": [{"role": "user", "content": "x"}], "user_id": user, "colour": "red"})
    check(bad.status_code == 400 and "colour" in bad.json()["detail"], f"unknown field: {bad.text}")
    bad = client.client.post("/v3/memories/add/", json={"messages": [{"role": "user", "content": "x"}], "user_id": user, "custom_instructions": "be brief"})
    check(bad.status_code == 501 and bad.json()["code"] == "not_supported", f"unsupported option: {bad.text}")
    err = expect(MemoryError, lambda: client.get_webhooks("project-1"), "webhooks")
    check("501" in str(err.error_code), f"webhooks answer 501: {err.error_code}")

    # Batches.
    ids = [m["id"] for m in client.get_all(filters={"AND": [{"user_id": user}, {"run_id": "run-1"}]})["results"]]
    answer = client.batch_update([{"memory_id": ids[0], "text": "Runs fifty kilometres a week."}])
    check("1" in answer["message"], f"batch update: {answer}")
    check(client.get(ids[0])["memory"] == "Runs fifty kilometres a week.", "batch update applied")
    answer = client.batch_delete([{"memory_id": ids[1]}])
    check("1" in answer["message"], f"batch delete: {answer}")
    expect(MemoryNotFoundError, lambda: client.get(ids[1]), "batch-deleted memory")

    # Delete one, then everything of the user.
    client.delete(marathon_id)
    expect(MemoryNotFoundError, lambda: client.get(marathon_id), "deleted memory")
    check([h["event"] for h in client.history(marathon_id)][-1] == "DELETE", "history records the deletion")
    answer = client.delete_all(user_id=user)
    check("deleted" in answer["message"].lower(), f"delete_all: {answer}")
    check(client.get_all(filters={"user_id": user})["count"] == 0, "delete_all left memories")

    # Entities: the token's users; reset erases them (and nobody else's).
    client.add("I prefer tea to coffee.", user_id=user, infer=False)
    entities = client.users()
    check([(e["type"], e["name"], e["total_memories"]) for e in entities["results"]] == [("user", user, 1)], f"users: {entities}")
    other.add("Mallory likes puzzles.", user_id="mallory", infer=False)
    client.reset()
    check(client.get_all(filters={"user_id": user})["count"] == 0, "reset left memories")
    check(other.get_all(filters={"user_id": "mallory"})["count"] == 1, "reset reached another user")
    seen["ok"] = True
    return seen


if __name__ == "__main__":
    try:
        seen = main()
    except CheckFailed as failure:
        print(f"check failed: {failure}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(seen))
