"""ConfigError, and turning pydantic's validation errors into one readable line.

Every message names the field path the way a user writes it in YAML (``resources.slots_per_trial``,
``bind_mounts[0].host_path``) followed by the reason. pydantic puts the tag of a discriminated union
into its error locations (``searcher.adaptive_asha.max_trials``); those segments are dropped by
walking the location against the input that was validated.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from det.common.jsontypes import JSONValue
from det.master.errors import MasterError

# Every problem is listed, so one round of fixes is enough; past this many (a generated config
# gone wrong) the rest are counted rather than shown.
MAX_SHOWN_ERRORS = 20


class ConfigError(MasterError, ValueError):
    """An experiment config that cannot be used.

    ``message`` is one line naming the field path and the reason; ``field_path`` is the path of the
    first problem (``""`` for the whole document, e.g. malformed YAML).
    """

    def __init__(self, message: str, field_path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field_path = field_path

    def __str__(self) -> str:
        return self.message


def join_path(parts: Iterable[str | int]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else p
    return out


def make_error(problems: Sequence[tuple[str, str]]) -> ConfigError:
    """One ConfigError from ``(path, message)`` pairs, messages already naming their path."""
    shown = [m for _, m in problems[:MAX_SHOWN_ERRORS]]
    text = "; ".join(shown)
    if len(problems) > MAX_SHOWN_ERRORS:
        text += f" (and {len(problems) - MAX_SHOWN_ERRORS} more)"
    return ConfigError(text, problems[0][0] if problems else "")


def at(path: str, reason: str) -> tuple[str, str]:
    """A problem at ``path``: ``"path: reason"`` (just the reason at the document root)."""
    return (path, f"{path}: {reason}" if path else reason)


def _user_loc(
    loc: tuple[int | str, ...], data: JSONValue, kind: str
) -> tuple[list[str | int], list[tuple[int, str]]]:
    """The location as the user wrote it, and the segments dropped from it.

    A segment that is not a key of the input is a union tag pydantic inserted, except the last
    segment of a "missing" error, which names the absent field.
    """
    out: list[str | int] = []
    skipped: list[tuple[int, str]] = []
    cur = data
    for i, seg in enumerate(loc):
        found, child = _step(cur, seg)
        if found:
            out.append(seg)
            cur = child
        elif kind == "missing" and i == len(loc) - 1:
            out.append(seg)
        else:
            skipped.append((len(out), str(seg)))
    return out, skipped


_MEMBER_NAMES = {
    # "int"/"float" are left out: they are also hyperparameter tags
    "str": "a string",
    "list[str]": "a list of strings",
    "Length": "a mapping like {batches: N}",
}


def _step(cur: JSONValue, seg: int | str) -> tuple[bool, JSONValue]:
    if isinstance(cur, dict) and isinstance(seg, str) and seg in cur:
        return True, cur[seg]
    if isinstance(cur, list) and isinstance(seg, int) and 0 <= seg < len(cur):
        return True, cur[seg]
    return False, None


def _is_member_name(seg: str) -> bool:
    """True for the member labels of a plain (undiscriminated) union: ``str``, ``list[str]``."""
    return seg in _MEMBER_NAMES or seg.startswith("list[")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}

_UNION_WHAT = {
    "searcher": "searcher",
    "checkpoint_storage": "storage type",
}


def _other_kind(parent: list[str | int], data: JSONValue, given: JSONValue) -> str:
    """The hint for a field of another kind of a union: ``: storage type 'gcs' has no such
    field`` (and, when the kind came from the master's defaults, that it did)."""
    where = join_path(parent)
    value = _lookup(data, where) if where else data
    kind = _union_kind_of(value)
    if kind is None:
        return ""
    what = _UNION_WHAT.get(str(parent[-1]) if parent else "", "type")
    origin = ""
    if where and given is not None and _union_kind_of(_lookup(given, where)) is None:
        origin = " (the master's, as the experiment names no type)"
    return f": {what} '{kind}'{origin} has no such field"


def _union_kind_of(value: JSONValue) -> str | None:
    if not isinstance(value, dict):
        return None
    kind = value.get("type", value.get("name"))
    return kind if isinstance(kind, str) else None


def _reason(
    err: ErrorDetails,
    path: list[str | int],
    known_names: Collection[str],
    top_names: Collection[str] = (),
    data: JSONValue = None,
    given: JSONValue = None,
) -> tuple[str, str]:
    """(path shown, reason) for one pydantic error; ``data``: the config validated, ``given``:
    the same before the master's defaults were merged in (None: not known)."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    where = join_path(path)
    if kind == "extra_forbidden":
        name = str(path[-1]) if path else "?"
        parent = join_path(path[:-1])
        hint = ""
        # At the top level the candidates are few (the config's own fields), so a looser match
        # still names the right one ("serach" -> "searcher"); deeper, any known field name.
        if len(path) == 1 and top_names:
            close = difflib.get_close_matches(name, list(top_names), n=1, cutoff=0.6)
        elif name in known_names:
            # A real field, of another kind of this union (s3's access_key under gcs): say
            # which kind this is, not "did you mean" the very same name.
            close, hint = [], _other_kind(path[:-1], data, given)
        else:
            close = difflib.get_close_matches(name, list(known_names), n=1, cutoff=0.8)
        if close and close[0] != name:
            hint = f" (did you mean '{close[0]}'?)"
        return where, f"unknown field '{name}'" + (f" at {parent}" if parent else "") + hint
    if kind == "missing":
        return where, f"{where}: required field missing"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values())) if ctx else "?"
        return where, f"{where}: must be {op} {bound} (got {_show(value)})"
    if kind == "finite_number":
        return where, f"{where}: must be a finite number (got {_show(value)})"
    if kind == "too_short":
        return where, f"{where}: must not be empty"
    if kind == "literal_error":
        return where, f"{where}: must be one of {ctx.get('expected', '?')} (got {_show(value)})"
    if kind == "union_tag_invalid":
        disc = str(ctx.get("discriminator", "type")).strip("'")
        if disc.endswith("()"):  # a callable discriminator: hyperparameters, keyed on type
            disc = "type"
        what = _UNION_WHAT.get(str(path[-1]) if path else "", "hyperparameter type")
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        expected = ", ".join(t for t in tags if t and t != "nested")
        tag = ctx.get("tag")
        return (
            f"{where}.{disc}",
            f"{where}.{disc}: unknown {what} '{tag}' (expected one of: {expected})",
        )
    if kind == "union_tag_not_found":
        disc = str(ctx.get("discriminator", "type")).strip("'")
        return f"{where}.{disc}", f"{where}.{disc}: required field missing"
    if kind in _TYPE_NAMES:
        return where, f"{where}: expected {_TYPE_NAMES[kind]} (got {_show(value)})"
    if kind == "value_error":
        return where, f"{where}: {ctx.get('error', err.get('msg'))}"
    return where, f"{where}: {err.get('msg', kind)} (got {_show(value)})"


def from_validation_error(
    exc: ValidationError,
    data: JSONValue,
    known_names: Collection[str] = (),
    top_names: Collection[str] = (),
) -> ConfigError:
    """Collapse a pydantic ValidationError into one ConfigError (see :func:`problems_of`)."""
    return make_error(problems_of(exc, data, known_names, top_names))


def problems_of(
    exc: ValidationError,
    data: JSONValue,
    known_names: Collection[str] = (),
    top_names: Collection[str] = (),
    given: JSONValue = None,
) -> list[tuple[str, str]]:
    """Every problem of a pydantic ValidationError as ``(path, message)``, in order.

    Errors of a plain union (``entrypoint: str | list[str]``) come once per member: they are
    merged into one "expected X or Y" message for that path. ``known_names`` (every field name
    of the schema) and ``top_names`` (the top level's) feed the "did you mean" hint of unknown
    fields; ``given`` (the config as written, before the master's defaults) lets the hint of a
    field of another union kind say where the kind came from.
    """
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    union_types: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False):
        path, skipped = _user_loc(tuple(err["loc"]), data, err["type"])
        members = [(pos, seg) for pos, seg in skipped if _is_member_name(seg)]
        if members:
            pos, member = members[0]
            where = join_path(path[:pos])
            if where not in union_types:
                union_types[where] = []
                problems.append((where, ""))
            union_types[where].append(_MEMBER_NAMES.get(member, member))
            continue
        where, message = _reason(err, path, known_names, top_names, data, given)
        if message in seen:
            continue
        seen.add(message)
        problems.append((where, message))
    resolved: list[tuple[str, str]] = []
    for where, message in problems:
        if not message:
            kinds = " or ".join(dict.fromkeys(union_types[where]))
            message = f"{where}: expected {kinds} (got {_show(_lookup(data, where))})"
        resolved.append((where, message))
    return resolved


def _lookup(data: JSONValue, dotted: str) -> JSONValue:
    cur = data
    for part in dotted.replace("[", ".").replace("]", "").split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur
