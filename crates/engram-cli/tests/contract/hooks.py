"""Schemathesis hooks for engram's contract test (crates/engram-cli/tests/api_contract.rs).

engram speaks JSON Lines (application/x-ndjson) in two places: POST /v1/import takes it and
GET /v1/export answers with it. Schemathesis knows neither, so these hooks write a generated
import body as lines, and check every line of an export against the Memory schema.

OpenAPI 3.1 cannot say that one query parameter excludes or needs another; /openapi.json says
these rules in words, and filter_case below keeps generated requests to them.
"""

import json

import jsonschema_rs
import schemathesis


@schemathesis.serializer("application/x-ndjson")
def to_json_lines(ctx, value):
    # The schema describes one line; a list (from negative testing) is written a line per item.
    items = value if isinstance(value, list) else [value]
    text = "".join(json.dumps(item) + "\n" for item in items)
    return {"data": text.encode("utf-8")}


_line_validators = {}


def _line_validator(operation):
    """The Memory schema of the document, with its references resolvable."""
    key = id(operation.schema)
    if key not in _line_validators:
        raw = operation.schema.raw_schema
        root = {"$ref": "#/components/schemas/Memory", "components": raw["components"]}
        _line_validators[key] = jsonschema_rs.Draft202012Validator(root, validate_formats=True)
    return _line_validators[key]


@schemathesis.deserializer("application/x-ndjson")
def from_json_lines(ctx, response):
    lines = [line for line in response.content.decode("utf-8").split("\n") if line]
    validator = _line_validator(ctx.operation)
    for number, line in enumerate(lines, 1):
        document = json.loads(line)
        errors = [f"{list(e.instance_path)}: {e.message}" for e in validator.iter_errors(document)]
        if errors:
            raise ValueError(f"line {number} breaks the Memory schema: {'; '.join(errors)}")
    if not lines:
        # An empty export has no line to check; schemathesis skips what it cannot read.
        raise NotImplementedError("an empty export")
    return json.loads(lines[0])


@schemathesis.hook
def filter_case(ctx, case):
    query = case.query or {}
    # A page starts at an offset or at a cursor, not both.
    if "offset" in query and "cursor" in query:
        return False
    # GET /v1/graph: limit bounds a search, so it needs query.
    if case.operation.path == "/v1/graph" and "limit" in query and "query" not in query:
        return False
    return True
