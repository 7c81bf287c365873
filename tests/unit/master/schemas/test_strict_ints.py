"""JSON ``true``/``false`` is not an integer anywhere a request carries one: every integer field
of every route's request body and query (found by walking the declared types, nested messages
and lists included) refuses a boolean with a message naming the field."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
import typing_extensions
from flask import Flask

from det.master.api import BLUEPRINTS
from det.master.errors import InvalidArgument
from det.master.schemas import d, validate, validator


def _contracts() -> list[tuple[str, Any]]:
    app = Flask("strict-ints")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    out: dict[int, tuple[str, Any]] = {}
    for rule in app.url_map.iter_rules():
        spec = getattr(app.view_functions[rule.endpoint], "_det_contract", None)
        if spec is None:
            continue
        for kind, tp in (("body", spec.body), ("query", spec.params)):
            if tp is not None:
                out.setdefault(id(tp), (f"{rule.rule} {kind}", tp))
    return list(out.values())


def _fields(tp: Any) -> dict[str, Any]:
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return {
            f.alias or name: typing_extensions.Annotated[f.annotation, *f.metadata]
            if f.metadata
            else f.annotation
            for name, f in tp.model_fields.items()
        }
    if typing_extensions.is_typeddict(tp):
        return typing.get_type_hints(tp, include_extras=True)
    return {}


def _members(hint: Any) -> Iterator[Any]:
    """The types a hint may hold (NotRequired, Annotated, unions and lists unwrapped); a list's
    element comes back as ``("list", element)``."""
    origin = typing_extensions.get_origin(hint)
    if origin in (typing_extensions.NotRequired, typing_extensions.Required):
        yield from _members(typing_extensions.get_args(hint)[0])
    elif origin is typing_extensions.Annotated:
        yield from _members(hint.__origin__)
    elif origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for arg in typing_extensions.get_args(hint):
            yield from _members(arg)
    elif origin is list:
        for inner in _members(typing_extensions.get_args(hint)[0]):
            yield ("list", inner)
    else:
        yield hint


def _bool_inputs(tp: Any, depth: int = 0) -> Iterator[tuple[str, object]]:
    """(field path, a value of ``tp`` with a boolean where that field's integer goes)."""
    if depth > 4:
        return
    for name, hint in _fields(tp).items():
        for member in _members(hint):
            wrap: Any = lambda v: v  # noqa: E731
            if isinstance(member, tuple):
                member, wrap = member[1], lambda v: [v]
            if member is int:
                yield name, {name: wrap(True)}
            elif _fields(member):
                for inner, value in _bool_inputs(member, depth + 1):
                    yield f"{name}.{inner}", {name: wrap(value)}


CASES = [
    (f"{where}: {path}", tp, value)
    for where, tp in _contracts()
    for path, value in _bool_inputs(tp)
]


def test_the_walk_finds_the_integers_the_issue_names() -> None:
    found = {case[0] for case in CASES}
    assert "/api/v1/experiments/continue body: id" in found
    assert any(c.endswith("body: experimentId") for c in found)
    assert any(c.endswith("body: runId") for c in found)
    assert len(CASES) > 50


@pytest.mark.parametrize(("case", "tp", "value"), CASES, ids=[c[0] for c in CASES])
def test_a_boolean_is_no_integer(case: str, tp: Any, value: object) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        validator(tp).validate_python(value)
    path = case.split(": ", 1)[1]
    errors = [
        (".".join(str(p) for p in e["loc"] if not isinstance(p, int)), e["type"])
        for e in info.value.errors()
    ]
    # (a union's member is named after the field: ``slots.id.function-before[...]``)
    assert any(
        (loc == path or loc.startswith(path + ".")) and kind == "int_type" for loc, kind in errors
    ), (case, errors)


def test_continue_with_id_true_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate(d.v1ContinueExperimentRequest, {"id": True})
    assert str(info.value) == "id: input should be a valid integer (got bool)"
    assert validate(d.v1ContinueExperimentRequest, {"id": 7}) == {"id": 7}


def test_a_query_string_integer_still_parses() -> None:
    from det.master.schemas.requests import TrialIdsQuery

    assert validate(TrialIdsQuery, {"trialIds": ["3", "4"]}, "query").trialIds == [3, 4]
    with pytest.raises(InvalidArgument):
        validate(TrialIdsQuery, {"trialIds": [False]}, "query")


@pytest.mark.parametrize(
    ("mtime", "stored"), [(1700000000, "1700000000"), ("1700000000", "1700000000"), (0, "0")]
)
def test_a_context_files_mtime_is_a_number_or_a_string(mtime: object, stored: str) -> None:
    """Determined's int64 in JSON: the 0.38.1 CLI sends ``--context`` mtimes as numbers."""
    body = validate(d.v1LaunchCommandRequest, {"files": [{"path": "a", "mtime": mtime}]})
    assert body["files"][0]["mtime"] == stored


@pytest.mark.parametrize("mtime", [True, "soon", 2**64, 1.5])
def test_a_context_files_mtime_that_is_no_int64_is_refused(mtime: object) -> None:
    with pytest.raises(InvalidArgument, match=r"files\[0\]\.mtime"):
        validate(d.v1LaunchCommandRequest, {"files": [{"path": "a", "mtime": mtime}]})


def test_an_integer_passes_without_a_python_call_and_anything_else_still_meets_the_lax_check() -> (
    None
):
    """Ints take the native strict branch (the metric ingest carries about 200 a request);
    a query string's ``"5"`` and ``5.0`` still pass through the lax check, ``true`` still fails."""
    import sys

    from det.master.schemas._types import _no_bool
    from det.master.schemas.trials import ReportMetricsBatchRequest

    calls: list[object] = []

    def hook(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is _no_bool.__code__:
            calls.append(frame.f_locals.get("value"))

    def checked(step: object) -> Any:
        body = {
            "reports": [
                {"group": "training", "trialRunId": 1, "stepsCompleted": s, "metrics": {}}
                for s in (1, 2, step)
            ]
        }
        sys.setprofile(hook)
        try:
            return validate(ReportMetricsBatchRequest, body)
        finally:
            sys.setprofile(None)

    assert checked(3)["reports"][2]["stepsCompleted"] == 3
    assert calls == []
    assert checked("5")["reports"][2]["stepsCompleted"] == 5
    assert calls == ["5"]
    assert checked(5.0)["reports"][2]["stepsCompleted"] == 5
    with pytest.raises(
        InvalidArgument, match=r"reports\[2\]\.stepsCompleted: input should be a valid integer"
    ):
        checked(True)
    with pytest.raises(InvalidArgument, match=r"reports\[2\]\.stepsCompleted: out of range"):
        checked(2**63)
