"""``GET /api/v1/openapi.json``: built once per app, then served as kept."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_the_document_is_built_once_and_lists_every_api_route(api_master: Any) -> None:
    m = api_master
    assert "det.openapi" not in m.app.extensions
    first = m.get("/api/v1/openapi.json")
    kept = m.app.extensions["det.openapi"]
    second = m.get("/api/v1/openapi.json")
    assert first == second == kept
    assert m.app.extensions["det.openapi"] is kept
    rules = {r.rule for r in m.app.url_map.iter_rules() if r.rule.startswith("/api/v1/")}
    listed = {p.replace("{", "<").replace("}", ">") for p in first["paths"]}
    # Paths name their parameters without Flask's converters (<int:id> is {id}).
    bare = {r.replace("<int:", "<").replace("<path:", "<") for r in rules}
    assert bare <= listed
