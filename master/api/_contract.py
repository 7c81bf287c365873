"""``@contract``: a route's typed request and response, checked before the view runs.

::

    @bp.post("/api/v1/experiments")
    @contract("CreateExperiment")
    def create(body: d.v1CreateExperimentRequest) -> d.v1CreateExperimentResponse: ...

A Determined operation's name brings its body message, query parameters and response message
from :data:`det.master.schemas.d.OPERATIONS`; det-only routes pass ``body=``, ``params=`` and
``response=`` types from :mod:`det.master.schemas.det`. The view receives the validated body as
``body`` and the query string as ``params`` (a dict keyed by the wire names, or a request model
of :mod:`det.master.schemas.requests` that carries its defaults; list parameters from repeated
keys). Nothing reaches the view, the services or the database that the types refuse.
The OpenAPI document (:mod:`det.master.api.openapi`) reads the same declaration.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic
import typing_extensions
from flask import request
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import MultiDict

from det.master.api._common import any_json, body_and_finiteness
from det.master.schemas import Operation, d, validate

F = TypeVar("F", bound=Callable[..., Any])


def _list_keys(params: Any) -> frozenset[str]:
    """The query parameters of ``params`` that are lists (sent as repeated keys), by their wire
    names (a request model's aliases)."""
    if isinstance(params, type) and issubclass(params, pydantic.BaseModel):
        hints = {
            field.alias or name: field.annotation for name, field in params.model_fields.items()
        }
    else:
        hints = typing.get_type_hints(params, include_extras=False)
    out = set()
    for key, hint in hints.items():
        # ``list[X]`` itself, or a union with one (``list[X] | None``)
        if any(typing.get_origin(a) is list for a in (hint, *typing.get_args(hint))):
            out.add(key)
    return frozenset(out)


def query_dict(params: Any, args: MultiDict[str, str] | None = None) -> dict[str, str | list[str]]:
    """The request's query string (or ``args``, a query string as Flask parses it) as the raw
    input of ``params``."""
    lists = _list_keys_cached(params)
    if args is None:
        args = request.args
    out: dict[str, str | list[str]] = {}
    for key in args:
        values = args.getlist(key)
        out[key] = values if key in lists else values[-1]
    return out


_list_keys_cached = functools.cache(_list_keys)


def contract(
    operation: str | None = None,
    *,
    body: Any = None,
    params: Any = None,
    response: Any = None,
) -> Callable[[F], F]:
    """Declare a route's contract (see the module's docstring)."""
    if operation is not None:
        op = d.OPERATIONS[operation]
        body = body if body is not None else op.body
        params = params if params is not None else op.params
        response = response if response is not None else op.response
        spec = op
    else:
        spec = Operation("", "", "", params, body, response, False)
    if operation is not None and (body, params, response) != (op.body, op.params, op.response):
        spec = Operation(op.name, op.method, op.path, params, body, response, op.stream)

    # A body that is not a message (SetUserPassword's is a bare JSON string) is read as any
    # JSON value; a message's must be a JSON object.
    bare = body is not None and not typing_extensions.is_typeddict(body)

    def mark(fn: F) -> F:
        @functools.wraps(fn)
        def view(*args: Any, **kwargs: Any) -> ResponseReturnValue:
            if body is not None:
                raw = any_json() if bare else body_and_finiteness()[0]
                kwargs["body"] = validate(body, raw)
            if params is not None:
                kwargs["params"] = validate(params, query_dict(params), "query")
            answer: ResponseReturnValue = fn(*args, **kwargs)
            return answer

        view._det_contract = spec  # type: ignore[attr-defined]
        return view  # type: ignore[return-value]

    return mark
