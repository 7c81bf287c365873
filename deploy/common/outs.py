"""A stack's outputs as Pulumi gives them back, and typed reads of them.

What ``automation.up``/``automation.outputs`` return and what ``commands.stack_outputs`` reads
from a local state file is Pulumi's JSON: the outputs the program exported at the stack's last
``up``, which may be an older det's (a key missing, or shaped otherwise), with secret values
left out of the state-file read. So the outputs stay a ``JSONObject`` (``status`` prints them as
they are), and code that uses one reads it through these functions: a value of another shape
reads as absent, never as a wrong type.
"""

from __future__ import annotations

from det.common.jsontypes import JSONObject, JSONValue


def text(outputs: JSONObject | None, key: str) -> str | None:
    """The output ``key`` when it is a string."""
    value = (outputs or {}).get(key)
    return value if isinstance(value, str) else None


def texts(outputs: JSONObject | None, key: str) -> list[str] | None:
    """The output ``key`` when it is a list (its items as strings)."""
    value = (outputs or {}).get(key)
    return [str(v) for v in value] if isinstance(value, list) else None


def mapping(outputs: JSONObject | None, key: str) -> dict[str, JSONValue] | None:
    """The output ``key`` when it is an object."""
    value = (outputs or {}).get(key)
    return value if isinstance(value, dict) else None


def text_mapping(outputs: JSONObject | None, key: str) -> dict[str, str]:
    """The output ``key`` as strings by name (``images``, ``mirror_images``); {} when absent."""
    return {k: str(v) for k, v in (mapping(outputs, key) or {}).items()}
