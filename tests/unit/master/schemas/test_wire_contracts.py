"""The schemas layer holds for every route: each API route declares its contract, a route that
claims a Determined operation sits at that operation's method and path, and request checks name
the field and the limit."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from det.master.api import BLUEPRINTS
from det.master.errors import InvalidArgument, PayloadTooLarge
from det.master.limits import NAME
from det.master.schemas import d, validate

# Not a Determined message: the OpenAPI document itself.
_NO_CONTRACT = {"openapi.openapi"}


@pytest.fixture(scope="module")
def app() -> Flask:
    app = Flask("contracts")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    return app


def _rules(app: Flask) -> list[tuple[str, str, object]]:
    out = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in _NO_CONTRACT or rule.endpoint == "static":
            continue
        if rule.endpoint.startswith("webui."):  # HTML pages, not the API
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, rule.rule, app.view_functions[rule.endpoint]))
    return out


def test_every_api_route_declares_its_contract(app: Flask) -> None:
    missing = sorted(
        f"{m} {path}"
        for m, path, view in _rules(app)
        if getattr(view, "_det_contract", None) is None
    )
    assert not missing, "routes without @contract:\n" + "\n".join(missing)


def test_a_route_claiming_a_determined_operation_is_at_its_path(app: Flask) -> None:
    wrong = []
    for method, path, view in _rules(app):
        spec = getattr(view, "_det_contract", None)
        if spec is None or not spec.name:
            continue
        ours = re.sub(r"<(?:\w+:)?\w+>", "{}", path)
        theirs = re.sub(r"\{\w+\}", "{}", spec.path)
        if (method, ours) != (spec.method, theirs):
            wrong.append(f"{method} {path} claims {spec.name} ({spec.method} {spec.path})")
    assert not wrong, "\n".join(wrong)


def test_a_wrong_type_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match=r"^projectId: .*integer"):
        validate(d.v1CreateExperimentRequest, {"config": "x", "projectId": "seven"})
    with pytest.raises(InvalidArgument, match=r"^query\.limit: out of range"):
        validate(d.GetExperimentsParams, {"limit": str(2**63)}, "query")
    with pytest.raises(InvalidArgument, match=r"^states\[0\]: must be one of"):
        validate(d.GetExperimentsParams, {"states": ["STATE_NOPE"]})


def test_a_field_over_its_limit_is_a_413_naming_field_and_limit() -> None:
    with pytest.raises(
        PayloadTooLarge, match=rf"^name: {NAME + 1} characters, the limit is {NAME}"
    ):
        validate(d.v1PatchModel, {"name": "m" * (NAME + 1)})
    with pytest.raises(PayloadTooLarge, match=r"^metadata: \d+ bytes as JSON, the limit is"):
        validate(d.v1PatchModel, {"metadata": {"k": "v" * 300_000}})


def test_request_messages_follow_protobuf_json_every_key_optional() -> None:
    # Determined's own requests carry only what is set; a missing key is its zero value.
    assert validate(d.v1CreateExperimentRequest, {}) == {}
    assert validate(d.v1File, {"path": "a.py"}) == {"path": "a.py"}
