"""``GET /api/v1/openapi.json``: an OpenAPI 3 document of the routes this master serves.

Built from the Flask URL map, so it can never list a route we do not serve or miss one we do,
and from each route's ``@contract`` (:mod:`det.master.api._contract`): request bodies, query
parameters and responses are the same types the master validates requests with, as JSON Schema
under ``components/schemas``. A route without a contract is listed with its path only.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, current_app
from flask.typing import ResponseReturnValue
from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode, JsonSchemaValue

import det
from det.common.jsontypes import JSONObject, JSONValue
from det.master.api._common import PUBLIC, USER

bp = Blueprint("openapi", __name__)

_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")


_REF = "#/components/schemas/{model}"


def _schemas(
    types: list[tuple[Any, JsonSchemaMode]],
) -> tuple[dict[tuple[Any, JsonSchemaMode], JsonSchemaValue], dict[str, JsonSchemaValue]]:
    """JSON Schemas of ``types`` (by (type, mode)) and the definitions they refer to."""
    inputs = [(tp, mode, TypeAdapter(tp)) for tp, mode in types]
    by_key, defs = TypeAdapter.json_schemas(inputs, ref_template=_REF)
    return dict(by_key), dict(defs.get("$defs", {}))


def _query_parameters(
    params: Any,
    schemas: dict[tuple[Any, JsonSchemaMode], JsonSchemaValue],
    defs: dict[str, JsonSchemaValue],
) -> list[JSONValue]:
    schema = schemas[(params, "validation")]
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    props = schema.get("properties", {})
    out: list[JSONValue] = []
    for name, schema in sorted(props.items()):
        # A query parameter is absent or has a value: "null" is not something a query can say.
        members = [m for m in schema.get("anyOf", []) if m.get("type") != "null"]
        if len(members) == 1:
            schema = {k: v for k, v in schema.items() if k != "anyOf"} | members[0]
        is_list = any(s.get("type") == "array" for s in [schema, *schema.get("anyOf", [])])
        out.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": schema,
                **({"style": "form", "explode": True} if is_list else {}),
            }
        )
    return out


def document() -> JSONObject:
    paths: dict[str, JSONObject] = {}
    views = [
        (rule, current_app.view_functions[rule.endpoint])
        for rule in current_app.url_map.iter_rules()
        if rule.endpoint != "static" and not rule.endpoint.startswith("webui.")
    ]
    wanted: set[tuple[Any, JsonSchemaMode]] = set()
    for _, view in views:
        spec = getattr(view, "_det_contract", None)
        if spec is None:
            continue
        if spec.body is not None:
            wanted.add((spec.body, "validation"))
        if spec.params is not None:
            wanted.add((spec.params, "validation"))
        if spec.response is not None:
            wanted.add((spec.response, "serialization"))
    schemas, defs = _schemas(sorted(wanted, key=lambda t: (t[0].__name__, t[1])))
    for rule, view in views:
        spec = getattr(view, "_det_contract", None)
        allowed = sorted(getattr(view, "_det_allow", frozenset({USER})))
        path = _CONVERTER.sub(lambda m: "{" + m.group(2) + "}", rule.rule)
        params: list[JSONValue] = [
            {
                "name": m.group(2),
                "in": "path",
                "required": True,
                "schema": {"type": "integer" if m.group(1) == "int" else "string"},
            }
            for m in _CONVERTER.finditer(rule.rule)
        ]
        doc = (view.__doc__ or rule.endpoint).strip().splitlines()[0]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            responses: JSONObject = {
                "200": {"description": "OK"},
                "default": {"description": "Error (Determined's error JSON)"},
            }
            op: JSONObject = {
                "operationId": f"{rule.endpoint}.{method.lower()}",
                "summary": doc,
                "parameters": params,
                "responses": responses,
                "x-det-callers": list[JSONValue](allowed),
            }
            if PUBLIC in allowed:
                op["security"] = []
            if spec is not None:
                if spec.name:
                    op["x-determined-operation"] = spec.name
                if spec.params is not None:
                    op["parameters"] = params + _query_parameters(spec.params, schemas, defs)
                if spec.body is not None:
                    op["requestBody"] = {
                        "required": True,
                        "content": {
                            "application/json": {"schema": schemas[(spec.body, "validation")]}
                        },
                    }
                if spec.response is not None:
                    media = "application/x-ndjson" if spec.stream else "application/json"
                    responses["200"] = {
                        "description": "OK",
                        "content": {media: {"schema": schemas[(spec.response, "serialization")]}},
                    }
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "det master API", "version": det.__version__},
        "components": {
            "schemas": dict(sorted(defs.items())),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "allocationToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Grpc-Metadata-x-allocation-token",
                },
            },
        },
        "security": [{"bearer": []}, {"allocationToken": []}],
        "paths": dict(sorted(paths.items())),
    }


@bp.get("/api/v1/openapi.json")
def openapi() -> ResponseReturnValue:
    """This document, built at its first request and kept with the app: its routes and their
    contracts do not change while it lives, and a build costs the schemas of every contract
    (0.42 CPU-s, against 0.01 served kept). Two first requests at once build it twice, to the
    same result."""
    doc = current_app.extensions.get(_KEPT)
    if doc is None:
        doc = current_app.extensions[_KEPT] = document()
    return doc


_KEPT = "det.openapi"
