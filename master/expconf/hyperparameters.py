"""Hyperparameter definitions.

A hyperparameter is a mapping with a ``type`` (const, int, double, log, categorical); a bare value
means ``{type: const, val: value}``; a mapping without ``type`` is a nested group of
hyperparameters. The resolved config always shows the explicit form.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag
from typing_extensions import TypeAliasType

from det.common.jsontypes import JSONObject, JSONValue

from .base import ConfigModel

HP_TYPES = ("const", "int", "double", "log", "categorical")
# A log hyperparameter's base when the config names none (the searcher's sampler reads it too).
DEFAULT_LOG_BASE = 10.0


class ConstHP(ConfigModel):
    type: Literal["const"] = "const"
    val: JSONValue = None


class IntHP(ConfigModel):
    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)


class DoubleHP(ConfigModel):
    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)


class LogHP(ConfigModel):
    """Values ``base ** x`` for x in [minval, maxval]."""

    type: Literal["log"] = "log"
    minval: float
    maxval: float
    base: float = Field(default=DEFAULT_LOG_BASE, gt=0)
    count: int | None = Field(default=None, ge=1)


class CategoricalHP(ConfigModel):
    type: Literal["categorical"] = "categorical"
    vals: list[JSONValue] = Field(min_length=1)


def _hp_tag(value: object) -> str | None:
    if isinstance(value, dict):
        t = value.get("type")
        if t is None:
            return "nested"
        return t if isinstance(t, str) else None
    if isinstance(value, ConfigModel):
        t = getattr(value, "type", None)
        return t if isinstance(t, str) else None
    return None


Hyperparameter = TypeAliasType(  # type: ignore[misc]
    "Hyperparameter",
    Annotated[
        Annotated[ConstHP, Tag("const")]
        | Annotated[IntHP, Tag("int")]
        | Annotated[DoubleHP, Tag("double")]
        | Annotated[LogHP, Tag("log")]
        | Annotated[CategoricalHP, Tag("categorical")]
        | Annotated[dict[str, "Hyperparameter"], Tag("nested")],  # type: ignore[misc]
        Discriminator(_hp_tag),
    ],
)

AnyHP = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP
# What mypy sees of a validated ``hyperparameters`` section: definitions and nested groups.
HPGroup = TypeAliasType(
    "HPGroup", "dict[str, ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP | HPGroup]"
)


def normalize(raw: object) -> object:
    """Bare values become ``{type: const, val: ...}``; nested groups are walked."""
    if not isinstance(raw, dict):
        return raw
    out: dict[object, object] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out[key] = value if "type" in value else normalize(value)
        else:
            out[key] = {"type": "const", "val": value}
    return out


def check(hps: HPGroup, *, grid: bool, prefix: str = "hyperparameters") -> list[tuple[str, str]]:
    """Range checks pydantic cannot express: ``(path, reason)`` for each bad hyperparameter."""
    problems: list[tuple[str, str]] = []
    for name, hp in hps.items():
        path = f"{prefix}.{name}"
        if isinstance(hp, dict):
            problems += check(hp, grid=grid, prefix=path)
            continue
        if isinstance(hp, IntHP | DoubleHP | LogHP):
            if not hp.minval < hp.maxval:
                problems.append(
                    (
                        path,
                        f"minval must be less than maxval (got minval={hp.minval}, maxval={hp.maxval})",
                    )
                )
            if grid and hp.count is None:
                problems.append(
                    (f"{path}.count", "required by the grid searcher (how many values to try)")
                )
    return problems


def to_dict(hps: HPGroup) -> JSONObject:
    out: JSONObject = {}
    for name, hp in hps.items():
        if isinstance(hp, dict):
            out[name] = to_dict(hp)
        else:
            out[name] = hp.model_dump(mode="json")
    return out
