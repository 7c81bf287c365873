"""The field types det's generated wire schemas use, with det's limits on what users send.

To mypy each alias is its plain type (``str``, ``int``, ``list[str]``, ``dict``); pydantic
enforces the limit when a request is validated. The numbers live in :mod:`det.master.limits`;
which Determined fields get which alias is the table in ``scripts/determined_schemas.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from det.common.jsontypes import JSONObject
from det.master import limits

T = TypeVar("T")

# The pydantic error type of a value over its size limit (a 413, not a 400).
TOO_LARGE = "det_too_large"

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _no_bool(value: object) -> object:
    """JSON ``true``/``false`` is no integer (pydantic's lax mode reads it as 1/0); a query
    string's ``"5"`` still is. (:func:`det.master.schemas.validator` does the same for every
    integer of a request type; a pydantic model's own validator is built here.)"""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


#: A request's integer: 64 bits, not a boolean.
Int64 = Annotated[int, BeforeValidator(_no_bool), Field(ge=INT64_MIN, le=INT64_MAX)]


def _int64_text(value: object) -> object:
    """An int64 in protobuf's JSON is a string or a number: either, as its decimal string."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return value  # pydantic names the type it got
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        raise PydanticCustomError("int64", "Input should be a 64-bit integer (a number or string)")
    return str(number)


#: An int64 field the official bindings type as a string (``v1File.mtime``) that Determined's
#: clients also send as a number (the 0.38.1 CLI's ``--context`` files do): both are accepted,
#: as Determined's gateway accepts them, and read as the string.
Int64Text = Annotated[str, BeforeValidator(_int64_text)]
Name = Annotated[str, Field(max_length=limits.NAME)]
Description = Annotated[str, Field(max_length=limits.DESCRIPTION)]
Notes = Annotated[str, Field(max_length=limits.NOTES)]
Label = Annotated[str, Field(max_length=limits.LABEL)]
Labels = Annotated[list[Label], Field(max_length=limits.LABELS)]
Password = Annotated[str, Field(max_length=limits.PASSWORD)]
ConfigText = Annotated[str, Field(max_length=limits.CONFIG_TEXT)]


def _json_size(limit: int) -> AfterValidator:
    def check(value: T) -> T:
        size = len(json.dumps(value, default=str))
        if size > limit:
            raise PydanticCustomError(
                TOO_LARGE,
                "{size} bytes as JSON, the limit is {limit}",
                {"size": size, "limit": limit},
            )
        return value

    return AfterValidator(check)


Metadata = Annotated[JSONObject, _json_size(limits.METADATA)]
Resources = Annotated[dict[str, str], _json_size(limits.METADATA)]


@dataclass(frozen=True)
class Operation:
    """One of Determined's v1 operations: how it is called and what it carries."""

    name: str
    method: str
    path: str
    params: Any  # a TypedDict of the query parameters (wire names), or None
    body: Any  # the request message, or None
    response: Any  # the response message, or None
    stream: bool  # the response is NDJSON lines of {"result": <response>}
