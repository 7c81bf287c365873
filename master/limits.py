"""Size limits for what users and tasks send: every text and JSON field has one.

A value over its limit is refused with :class:`PayloadTooLarge` (413) naming the field and the
limit, before anything is written; a wrong type is :class:`InvalidArgument` (400). Log lines
are the exception: a line longer than :data:`LOG_LINE` is cut (with a marker saying how much
was dropped) rather than refused, so a training script that prints a huge line loses that
line's tail, not its whole batch of logs.
"""

from __future__ import annotations

import json
from typing import Any

from det.common.jsontypes import JSONObject
from det.master.errors import InvalidArgument, PayloadTooLarge

NAME = 512  # experiment, model, model version names
DESCRIPTION = 16 * 1024
NOTES = 1024 * 1024  # markdown notes
LABEL = 255
LABELS = 100
METADATA = 256 * 1024  # model, version and checkpoint metadata, as JSON
HYPERPARAMETERS = 1000  # leaves of an experiment's hyperparameter tree
LOG_LINE = 64 * 1024
PASSWORD = 1024
CONFIG_TEXT = 1024 * 1024  # an experiment or template config as YAML text


def text(field: str, value: Any, limit: int, *, required: bool = False) -> str:
    """``value`` as a string of at most ``limit`` characters (None or missing: ``""``)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field}: must be a string")
    if required and not value.strip():
        raise InvalidArgument(f"{field}: required non-empty string")
    if len(value) > limit:
        raise PayloadTooLarge(f"{field}: {len(value)} characters, the limit is {limit}")
    return value


def labels(field: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InvalidArgument(f"{field}: must be a list of strings")
    if len(value) > LABELS:
        raise PayloadTooLarge(f"{field}: {len(value)} labels, the limit is {LABELS}")
    for i, label in enumerate(value):
        text(f"{field}[{i}]", label, LABEL)
    return list(value)


def json_object(field: str, value: object, limit: int = METADATA) -> JSONObject:
    """A JSON object whose encoding is at most ``limit`` bytes (None: ``{}``)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field}: must be an object")
    size = len(json.dumps(value, default=str))
    if size > limit:
        raise PayloadTooLarge(f"{field}: {size} bytes as JSON, the limit is {limit}")
    return value


def count_leaves(tree: Any) -> int:
    if isinstance(tree, dict):
        return sum(count_leaves(v) for v in tree.values()) or 1
    return 1


def hyperparameters(tree: Any) -> None:
    n = count_leaves(tree) if isinstance(tree, dict) and tree else 0
    if n > HYPERPARAMETERS:
        raise PayloadTooLarge(f"hyperparameters: {n} values, the limit is {HYPERPARAMETERS}")


def log_line(line: str) -> str:
    if len(line) <= LOG_LINE:
        return line
    return line[:LOG_LINE] + f" [det: {len(line) - LOG_LINE} characters cut]"
