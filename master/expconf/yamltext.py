"""YAML text read as JSON: how an experiment config and a ``--config KEY=VALUE`` value are loaded.

YAML 1.2's core schema, as Determined's Go master reads configs: ``1e-3`` is a float (PyYAML's
YAML 1.1 would read a string) and a date stays the string it is written as (YAML 1.1 would make
it a timestamp). A duplicate key is refused. What comes out is JSON by construction
(``JSONValue``): a value YAML can hold but JSON cannot (``!!binary``, ``!!set``, a non-string
key) is refused with a message naming where it is.
"""

from __future__ import annotations

import re

import yaml

from det.common.jsontypes import JSONObject, JSONValue

from .errors import ConfigError

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class YAMLError(ConfigError):
    """Text that is not YAML, or YAML that is not JSON. ``reason`` is one line; ``line`` and
    ``column`` (from 1) say where, when known."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.column = column


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's floats, no timestamps, and duplicate keys refused."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _construct_mapping(
    loader: _Loader, node: yaml.MappingNode, deep: bool = False
) -> dict[object, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _where(path: str) -> str:
    return f" at {path}" if path else ""


def to_json(value: object, path: str = "") -> JSONValue:
    """``value`` (what a YAML loader built) as JSON, or YAMLError naming the first part that is
    not JSON."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [to_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: JSONObject = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise YAMLError(f"field names must be strings (got {k!r}){_where(path)}")
            out[k] = to_json(v, f"{path}.{k}" if path else k)
        return out
    raise YAMLError(f"not a JSON value{_where(path)} (a {type(value).__name__})")


def load_json(text: str) -> JSONValue:
    """The YAML document in ``text`` as JSON; YAMLError says what is wrong and where."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = " ".join((e.problem or e.context or "cannot parse").split())
        if mark is None:
            raise YAMLError(problem) from None
        raise YAMLError(problem, mark.line + 1, mark.column + 1) from None
    except yaml.YAMLError as e:
        raise YAMLError(" ".join(str(e).split())) from None
    return to_json(data)
