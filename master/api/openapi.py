"""``GET /api/v1/openapi.json``: an OpenAPI 3 document of the routes this master serves.

Built from the Flask URL map, so it can never list a route we do not serve or miss one we do.
Bodies follow Determined's v1 wire format (see its ``bindings``); they are not spelled out here.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, current_app

import det
from det.master.api._common import PUBLIC, USER

bp = Blueprint("openapi", __name__)

_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for rule in current_app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.endpoint.startswith("webui."):  # not the API
            continue
        view = current_app.view_functions[rule.endpoint]
        allowed = sorted(getattr(view, "_det_allow", frozenset({USER})))
        path = _CONVERTER.sub(lambda m: "{" + m.group(2) + "}", rule.rule)
        params = [
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
            op: dict[str, Any] = {
                "operationId": f"{rule.endpoint}.{method.lower()}",
                "summary": doc,
                "parameters": params,
                "responses": {
                    "200": {"description": "OK"},
                    "default": {"description": "Error (Determined's error JSON)"},
                },
                "x-det-callers": allowed,
            }
            if PUBLIC in allowed:
                op["security"] = []
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "det master API", "version": det.__version__},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "allocationToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Grpc-Metadata-x-allocation-token",
                },
            }
        },
        "security": [{"bearer": []}, {"allocationToken": []}],
        "paths": dict(sorted(paths.items())),
    }


@bp.get("/api/v1/openapi.json")
def openapi() -> Any:
    """This document."""
    return document()
