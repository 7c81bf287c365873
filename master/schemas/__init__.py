"""det's typed wire contracts: one type per Determined v1 message, and how requests are checked.

- :mod:`det.master.schemas._determined` (generated from the official bindings) has every
  Determined v1 message as a ``TypedDict``, every enum as a ``Literal`` and every operation's
  query parameters; ``d.OPERATIONS[name]`` says what an operation carries.
- :mod:`det.master.schemas.det` has det's own messages (routes Determined does not have), in the
  same style.
- Routes declare their contract with ``det.master.api._contract.contract``: the request body and
  query string are validated here before the view runs (wrong types, a boolean for an integer,
  out-of-range integers and oversized fields are refused with a message naming the field), responses are typed with the
  same ``TypedDict`` so mypy checks every serializer, and the OpenAPI document is built from them.

Serializers (row -> message) live beside the messages they build, in the resource modules of
this package.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import pydantic
import pydantic_core
from pydantic._internal import _validators as _pydantic_validators
from pydantic_core import core_schema

from det.master.errors import InvalidArgument, PayloadTooLarge
from det.master.schemas import _determined as d
from det.master.schemas._types import TOO_LARGE, Operation, _no_bool

__all__ = ["Operation", "adapter", "d", "validate", "validator"]

T = TypeVar("T")


_adapters: dict[object, pydantic.TypeAdapter[Any]] = {}
_validators: dict[object, pydantic_core.SchemaValidator] = {}


def adapter(tp: type[T]) -> pydantic.TypeAdapter[T]:
    """The (cached) pydantic adapter of a message type (its JSON schema, for the document)."""
    found = _adapters.get(tp)
    if found is None:
        found = _adapters[tp] = pydantic.TypeAdapter(tp)
    return found


def _ints_refuse_bools(schema: object) -> object:
    """``schema`` (a pydantic core schema) with every integer refusing ``true``/``false``."""
    if isinstance(schema, list):
        return [_ints_refuse_bools(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    folded = _int64_folded(schema)
    if folded is not None:
        return folded
    out = {k: _ints_refuse_bools(v) for k, v in schema.items()}
    if out.get("type") == "int":
        return _refusing_bools(out)  # type: ignore[arg-type]
    return out


#: The label of :func:`_refusing_bools`'s native branch in an error's location.
_EXACT = "int-exact"


def _refusing_bools(schema: core_schema.IntSchema) -> core_schema.UnionSchema:
    """The integer ``schema`` refusing booleans: an integer itself (nearly every value a
    request carries) passes a native strict check with the same bounds, without a Python call;
    anything else (a query string's ``"5"``, ``5.0``, ``true``) goes on to the lax check behind
    :func:`_no_bool`, and only that branch's errors are reported (:func:`validate` drops the
    first branch's), so they are what they were without the native branch."""
    return core_schema.union_schema(
        [
            ({**schema, "strict": True}, _EXACT),
            (core_schema.no_info_before_validator_function(_no_bool, schema), "int"),
        ],
        mode="left_to_right",
    )


_BOUNDS = {
    "ge": _pydantic_validators.greater_than_or_equal_validator,
    "le": _pydantic_validators.less_than_or_equal_validator,
}


def _int64_folded(schema: dict[object, object]) -> object | None:
    """``Int64``'s schema (``_types``: the boolean refused, then its range checked by two
    Python calls pydantic adds because the refusal comes first) as one native integer check
    with the range (:func:`_refusing_bools`), or None when ``schema`` is not that. The same
    values pass and the same errors (types, places) are raised; the metric ingest validates
    about 200 integers a request, 4 Python calls each before, none now."""
    bounds: dict[str, int] = {}
    node: object = schema
    while _field(node, "type") == "function-after":
        check = _field(_field(node, "function"), "function")
        if not isinstance(check, functools.partial) or check.args or len(check.keywords) != 1:
            return None
        ((name, value),) = check.keywords.items()
        if _BOUNDS.get(name) is not check.func or name in bounds or not isinstance(value, int):
            return None
        bounds[name] = value
        node = _field(node, "schema")
    if not bounds or _field(node, "type") != "function-before":
        return None
    if _field(_field(node, "function"), "function") is not _no_bool:
        return None
    inner = _field(node, "schema")
    if not isinstance(inner, dict) or inner.get("type") != "int":
        return None
    if set(inner) - {"type", "metadata"}:
        return None
    return _refusing_bools({**inner, **bounds})  # type: ignore[typeddict-item]


def _field(node: object, key: str) -> object:
    return node.get(key) if isinstance(node, dict) else None


def validator(tp: object) -> pydantic_core.SchemaValidator:
    """The (cached) validator of a request type: its pydantic schema, except that no integer
    anywhere in it takes a JSON boolean (pydantic's lax mode reads ``true`` as 1; an id of
    ``true`` is a client's mistake, not experiment 1). Query strings (``"5"``) still parse.
    A pydantic model inside keeps its own prebuilt validator: its integers are ``Int64``,
    which refuses booleans itself (``_types``)."""
    found = _validators.get(tp)
    if found is None:
        schema = _ints_refuse_bools(adapter(tp).core_schema)  # type: ignore[arg-type]
        assert isinstance(schema, dict)
        found = _validators[tp] = pydantic_core.SchemaValidator(schema)
    return found


def _where(loc: tuple[str | int, ...], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "list[", "dict[", "int", "str", "bool", "float")):
            continue  # pydantic's name for a union member or a validator, not a field
        else:
            out = f"{out}.{part}" if out else part
    return out or "request"


def _reason(err: pydantic_core.ErrorDetails) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "required"
    if kind in ("string_too_long", "too_long"):
        limit = ctx.get("max_length")
        got = len(value) if isinstance(value, str | list | dict) else "?"
        unit = "characters" if isinstance(value, str) else "items"
        return f"{got} {unit}, the limit is {limit}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return "out of range (a 64-bit integer)"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {str(value)[:80]!r})"
    if kind.startswith(("int_", "bool_", "float_", "string_", "list_", "dict_", "typed_dict")):
        shown = type(value).__name__ if not isinstance(value, str) else repr(value[:80])
        return f"{err['msg'].lower()} (got {shown})"
    return str(err["msg"])


def validate(tp: type[T], value: object, where: str = "") -> T:
    """``value`` checked against the message type ``tp``; bad input raises
    :class:`InvalidArgument` (400) or, for a field over its size limit, :class:`PayloadTooLarge`
    (413), naming the field (``where`` prefixes its path, e.g. ``"query"``)."""
    try:
        checked: T = validator(tp).validate_python(value)
        return checked
    except pydantic.ValidationError as e:
        # An integer's native branch failed too whenever its lax one did (_refusing_bools).
        every = e.errors(include_url=False)
        errors = [err for err in every if _EXACT not in err["loc"]] or every
        first = errors[0]
        message = f"{_where(first['loc'], where)}: {_reason(first)}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more)"
        if first["type"] in ("string_too_long", "too_long", TOO_LARGE):
            raise PayloadTooLarge(message) from None
        raise InvalidArgument(message) from None
