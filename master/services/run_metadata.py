"""Run metadata: what training code records about its run (Determined's ``PostRunMetadata``,
``core_context.train.set_metadata``), one JSON object per trial, replaced whole on each post.

The rules are Determined's (``master/internal/run/runs.go``): nesting at most 10 deep, keys of
at most 50 characters without ``$ . [ ]``, arrays of at most 100 items, strings of at most 5,000
characters, at most 1,000 keys in all; det adds a size cap (:data:`det.master.limits.METADATA`).
A violation is one line naming the key's path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject
from det.master import db, limits
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound

MAX_DEPTH = 10
MAX_KEY_LENGTH = 50
MAX_ARRAY_LENGTH = 100
MAX_STRING_LENGTH = 5000
MAX_KEYS = 1000
_BAD_KEY = re.compile(r"[$.\[\]]")


@dataclass(frozen=True, slots=True)
class _Metadata:
    metadata: JSONObject | None  # trials.metadata: NULL until a run's metadata is first set


def check(metadata: object) -> JSONObject:
    """``metadata`` if it follows the rules; else InvalidArgument naming the path. Pure."""
    value = limits.json_object("metadata", metadata)
    count = 0

    def walk(node: Any, path: str, depth: int, in_array: bool) -> None:
        nonlocal count
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"{path}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            if in_array:  # an object in an array is one value, as Determined indexes it
                count += 1
                return
            for key, child in node.items():
                where = f"{path}.{key}"
                if len(key) > MAX_KEY_LENGTH:
                    raise InvalidArgument(f"{where}: keys are at most {MAX_KEY_LENGTH} characters")
                if _BAD_KEY.search(key):
                    raise InvalidArgument(f"{where}: keys may not contain $ . [ or ]")
                walk(child, where, depth + 1, False)
            if not node:
                count += 1
        elif isinstance(node, list):
            if len(node) > MAX_ARRAY_LENGTH:
                raise InvalidArgument(f"{path}: arrays hold at most {MAX_ARRAY_LENGTH} items")
            for item in node:
                if isinstance(item, list):
                    raise InvalidArgument(f"{path}: arrays of arrays are not allowed")
                walk(item, path, depth, True)
        else:
            if isinstance(node, str) and len(node) > MAX_STRING_LENGTH:
                raise InvalidArgument(f"{path}: strings are at most {MAX_STRING_LENGTH} characters")
            count += 1
        if count > MAX_KEYS:
            raise InvalidArgument(f"metadata: more than {MAX_KEYS} keys")

    walk(value, "metadata", 0, False)
    return value


def set_(conn: Conn, trial_id: int, metadata: JSONObject) -> JSONObject:
    """The run's metadata is now ``metadata`` (checked by :func:`check`); returns it."""
    row = db.fetch_row(
        conn,
        _Metadata,
        "UPDATE trials SET metadata = %s WHERE id = %s RETURNING metadata",
        (Jsonb(metadata), trial_id),
    )
    if row is None:
        raise NotFound(f"run {trial_id} not found")
    return dict(row.metadata or {})


def get(conn: Conn, trial_id: int) -> JSONObject:
    """The run's metadata ({} if none was ever set)."""
    row = db.fetch_row(conn, _Metadata, "SELECT metadata FROM trials WHERE id = %s", (trial_id,))
    if row is None:
        raise NotFound(f"run {trial_id} not found")
    return dict(row.metadata or {})
