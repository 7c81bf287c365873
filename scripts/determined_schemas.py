"""Writes master/schemas/_determined.py: Determined 0.38.1's v1 wire format as typed Python.

Read from the official package's generated bindings (the judge of the wire format): every
message becomes a ``TypedDict`` (keys Determined always sends are required, the rest
``NotRequired``), every enum a ``Literal``, and every operation an :class:`Operation` naming its
method, path, query parameters (a ``TypedDict`` keyed by the wire names), body message, response
message and whether the response is a stream of ``{"result": ...}`` lines.

The same ``TypedDict`` serves both ways: the master validates request bodies and query strings
against it with pydantic (see ``det.master.schemas``) and mypy checks every response serializer
against it. Fields whose size det limits get the limit's alias from ``det.master.schemas._types``
(``_FIELD_TYPES`` below is the one table that says which). Run it in the official client's venv
(``tests/compat/official.py`` builds it)::

    .cache/determined-0.38.1/bin/python scripts/determined_schemas.py
"""

from __future__ import annotations

import collections.abc
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
OUT = _REPO / "master" / "schemas" / "_determined.py"

# Field name -> the alias in det.master.schemas._types that carries det's limit for it. The
# aliases are plain ``str``/``list``/``dict`` to mypy; pydantic enforces the limits.
_FIELD_TYPES: dict[tuple[str, str], str] = {
    ("name", "str"): "Name",
    ("username", "str"): "Name",
    ("displayName", "str"): "Name",
    ("description", "str"): "Description",
    ("notes", "str"): "Notes",
    ("comment", "str"): "Description",
    ("config", "str"): "ConfigText",
    ("labels", "list[str]"): "Labels",
    ("label", "str"): "Label",
    ("metadata", "dict[str, Any]"): "Metadata",
    ("resources", "dict[str, str]"): "Resources",
    ("password", "str"): "Password",
    ("searchText", "str"): "Description",
    ("mtime", "str"): "Int64Text",
}


def _type(ann: typing.Any, ns: dict[str, typing.Any]) -> str:
    """The Python annotation (as source) of a bindings annotation."""
    if isinstance(ann, str):
        ann = eval(ann, ns)  # the official bindings' own annotations
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is typing.Any:
        return "Any"
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None) and getattr(a, "__name__", "") != "Unset"]
        body = " | ".join(_type(a, ns) for a in inner)
        return body + " | None" if type(None) in args else body
    if origin in (list, collections.abc.Sequence):
        return f"list[{_type(args[0], ns)}]"
    if origin is dict:
        return f"dict[{_type(args[0], ns)}, {_type(args[1], ns)}]"
    if ann is int:
        return "Int64"
    if ann in (bool, float, str):
        return ann.__name__
    if inspect.isclass(ann):
        return ann.__name__
    raise ValueError(f"unhandled annotation {ann!r}")


def _strip_none(t: str) -> tuple[str, bool]:
    return (t[: -len(" | None")], True) if t.endswith(" | None") else (t, False)


def _field(name: str, t: str) -> str:
    base, optional = _strip_none(t)
    alias = _FIELD_TYPES.get((name, base))
    if alias is None and base == "Int64" and name in ("limit",):
        alias = "Int64"
    if alias:
        base = alias
    return base + (" | None" if optional else "")


def _request_messages(b: typing.Any) -> set[str]:
    """Messages that travel in a request body, directly or nested."""
    ns = vars(b)
    todo = []
    for fname, fn in ns.items():
        if re.fullmatch(r"(get|post|put|patch|delete)_\w+", fname) and inspect.isfunction(fn):
            p = inspect.signature(fn).parameters.get("body")
            if p is not None and isinstance(p.annotation, str) and p.annotation.isidentifier():
                todo.append(p.annotation)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        cls = ns.get(name)
        if name in seen or not inspect.isclass(cls) or not issubclass(cls, b.Printable):
            continue
        seen.add(name)
        for p in inspect.signature(cls.__init__).parameters.values():
            todo += re.findall(r"\b(v1\w+|\w+v1\w+|[A-Z]\w+)\b", str(p.annotation))
    return seen


def messages(b: typing.Any) -> tuple[list[str], list[str]]:
    """Every message as a TypedDict. Keys Determined always sends are required, except in
    messages that travel in requests: there, as in protobuf's JSON, a missing key is the
    field's zero value, so every key is optional."""
    ns = vars(b)
    in_requests = _request_messages(b)
    enums, classes = [], []
    for name, obj in sorted(ns.items()):
        if not inspect.isclass(obj) or obj.__module__ != b.__name__:
            continue
        if issubclass(obj, b.DetEnum) and obj is not b.DetEnum:
            values = ", ".join(repr(m.value) for m in obj)
            enums.append(f"{name} = Literal[{values}]")
        elif issubclass(obj, b.Printable) and obj is not b.Printable and name != "Printable":
            sig = inspect.signature(obj.__init__)
            lines = [f"class {name}(TypedDict):"]
            for pname, p in sig.parameters.items():
                if pname == "self":
                    continue
                t = _field(pname, _type(p.annotation, ns))
                required = p.default is inspect.Parameter.empty and name not in in_requests
                lines.append(f"    {pname}: {t if required else f'NotRequired[{t}]'}")
            if len(lines) == 1:
                lines.append("    pass")
            classes.append("\n".join(lines))
    return enums, classes


_PARAMS = re.compile(r"_params = \{(.*?)\n    \}", re.S)
_PARAM_KEY = re.compile(r'^\s*"([^"]+)": (\w+)', re.M)
_CALL = re.compile(r'method="(\w+)",\s*path=f?"([^"]+)"')


def operations(b: typing.Any) -> tuple[list[str], list[str]]:
    ns = vars(b)
    param_types, ops = [], []
    for fname, fn in sorted(ns.items()):
        m = re.fullmatch(r"(get|post|put|patch|delete)_(\w+)", fname)
        if not m or not inspect.isfunction(fn):
            continue
        op = m[2]
        src = inspect.getsource(fn)
        call = _CALL.search(src)
        if call is None:
            continue
        method, path = call[1], call[2]
        sig = inspect.signature(fn)
        path_names = set(re.findall(r"\{(\w+)\}", path))
        body = "None"
        if "body" in sig.parameters:
            bt = _type(sig.parameters["body"].annotation, ns)
            body = bt if bt[0].isalpha() and bt.isidentifier() else "None"
        wire_names: dict[str, str] = {}
        pm = _PARAMS.search(src)
        if pm:
            for key, var in _PARAM_KEY.findall(pm[1]):
                wire_names[var] = key
        query = []
        for pname, p in sig.parameters.items():
            if pname in ("session", "body") or pname in path_names:
                continue
            t = _field(pname, _type(p.annotation, ns))
            query.append(f'"{wire_names.get(pname, pname)}": {t}')
        params = "None"
        if query:
            params = f"{op}Params"
            param_types.append(
                f'{params} = TypedDict(\n    "{params}",\n    {{\n'
                + "".join(f"        {q},\n" for q in query)
                + "    },\n    total=False,\n)"
            )
        ret = sig.return_annotation
        stream = isinstance(ret, str) and ret.startswith("typing.Iterable[")
        if stream:
            ret = ret[len("typing.Iterable[") : -1]
        response = "None" if ret in (None, "None") else _type(ret, ns)
        ops.append(
            f'    "{op}": Operation("{op}", "{method}", "{path}", {params}, {body}, {response},'
            f" {stream}),"
        )
    return param_types, ops


HEADER = '''"""Determined 0.38.1's v1 wire format: messages, enums and operations.

Generated by scripts/determined_schemas.py from the official package's bindings; do not edit.
"""

# ruff: noqa: E501, N801, UP040
from __future__ import annotations

from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

from det.master.schemas._types import (
    ConfigText,
    Description,
    Int64,
    Int64Text,
    Label,
    Labels,
    Metadata,
    Name,
    Notes,
    Operation,
    Password,
    Resources,
)

__all__ = ["OPERATIONS", "Any"]
'''


def main() -> None:
    from determined.common.api import bindings as b

    enums, classes = messages(b)
    param_types, ops = operations(b)
    text = "\n\n".join(
        [
            HEADER,
            *enums,
            *classes,
            *param_types,
            "OPERATIONS: dict[str, Operation] = {\n" + "\n".join(ops) + "\n}\n",
        ]
    )
    OUT.write_text(text)
    ruff = _REPO / ".venv" / "bin" / "ruff"
    subprocess.run([str(ruff), "check", "--fix", "-q", str(OUT)], check=False)
    subprocess.run([str(ruff), "format", "-q", str(OUT)], check=True)


if __name__ == "__main__":
    sys.exit(main())
