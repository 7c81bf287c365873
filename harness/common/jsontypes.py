"""The type of a JSON document, for data that is JSON by nature.

Use these where a value really is arbitrary JSON: a user's config as written, a webhook's
payload, a JSON column passed through unread. They are not a way to avoid typing rows or
requests: a database row is a dataclass (psycopg's ``class_row``), a request a pydantic model.
Unlike ``dict[str, Any]``, mypy checks both directions: only JSON values go in, and a value read
out must be narrowed (``isinstance``) before it is used as a ``str``, an ``int`` or a mapping.
"""

from __future__ import annotations

from typing import Dict, List, Union

from typing_extensions import TypeAlias, TypeAliasType

# Spelled for Python 3.8, as everything the harness bundle carries into task images
# (tests/unit/harness/test_harness_py38.py): ``typing`` generics, no runtime ``X | Y``.
JSONScalar: TypeAlias = Union[bool, int, float, str, None]
# TypeAliasType: a recursive alias both mypy and pydantic resolve (pydantic validates it).
JSONValue = TypeAliasType(
    "JSONValue",
    "Union[bool, int, float, str, List[JSONValue], Dict[str, JSONValue], None]",  # noqa: UP007 (3.8)
)
JSONObject: TypeAlias = Dict[str, JSONValue]
