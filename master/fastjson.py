"""JSON on the metric-ingest path: orjson for strict JSON, the standard library otherwise.

Determined's clients encode with Python's ``json``, which writes non-finite floats as the bare
literals ``NaN``/``Infinity``. orjson refuses those (and numbers that overflow to infinity), so
a body it parses holds only finite numbers; that fact is what lets :func:`dumps` use orjson,
which would otherwise turn a NaN silently into ``null``.
"""

from __future__ import annotations

import json
import math

import orjson

from det.common.jsontypes import JSONValue


def loads(data: bytes) -> tuple[JSONValue, bool]:
    """Parses ``data``; returns the value and whether every number in it is finite.

    Raises ``ValueError`` (``json.JSONDecodeError``) when ``data`` is not JSON at all.
    """
    try:
        return orjson.loads(data), True
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data), False
    except RecursionError:
        # orjson stops at 1,024 levels; the standard library would overflow the stack.
        raise ValueError("nested too deeply") from None


def dumps(value: object, *, finite: bool) -> str:
    """Encodes ``value``; non-finite floats become Determined's strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"`` (JSON and jsonb cannot carry them as numbers).

    ``finite=True`` is a promise from :func:`loads` that there are none to look for.
    """
    if finite:
        return orjson.dumps(value).decode()
    try:  # usually there are none after all: the C encoder finds out without a Python walk
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(encodable(value), allow_nan=False)


def fragment(text: str | None, default: str = "null") -> orjson.Fragment:
    """JSON text (a jsonb column read as text, say) that :func:`orjson.dumps` writes as it is:
    neither decoded into Python objects nor encoded again (``default`` for NULL)."""
    return orjson.Fragment(text if text is not None else default)


def encodable_scalar(value: JSONValue) -> JSONValue:
    """One scalar made strict-JSON encodable: a non-finite float becomes its string, anything
    else is returned as it is (lists and dicts too: :func:`encodable` walks those)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def encodable(value: object) -> object:
    """``value`` made strict-JSON encodable: every non-finite float in it, however deep,
    replaced by its string."""
    if isinstance(value, dict):
        return {k: encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(v) for v in value]
    return encodable_scalar(value) if isinstance(value, float) else value
