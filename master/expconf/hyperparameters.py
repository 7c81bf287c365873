"""Hyperparameter definitions: the one model of the ``hyperparameters:`` section.

A hyperparameter is a mapping with a ``type`` (const, int, double, log, categorical); a bare value
means ``{type: const, val: value}``; a mapping without ``type`` is a nested group of
hyperparameters. The resolved config always shows the explicit form.

The experiment config validates the section with these models, and the searcher
(``det.master.searcher.hparams``: sampling, grids, TPE, the simulator) reads the same validated
models through ``parse_section``: a rule or a default written here holds for both, with the same
error message.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator
from typing_extensions import TypeAliasType

from det.common.jsontypes import JSONObject, JSONValue

from .base import ConfigModel
from .errors import ConfigError, at, make_error, problems_of

# A log hyperparameter's base when the config names none.
DEFAULT_LOG_BASE = 10.0
# Why the grid searcher refuses an int/double/log hyperparameter without ``count``.
GRID_NEEDS_COUNT = "required by the grid searcher (how many values to try)"


class ConstHP(ConfigModel):
    type: Literal["const"] = "const"
    val: JSONValue

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: object) -> object:
        """``val: null`` is a constant null (a bare ``lr: null`` means it too), not "the
        default": only the other null keys are dropped, and ``val`` stays required."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k == "val"}
        return data


class IntHP(ConfigModel):
    """An integer in ``[minval, maxval]``, both ends included."""

    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)


class DoubleHP(ConfigModel):
    """A float drawn uniformly from ``[minval, maxval]``."""

    type: Literal["double"] = "double"
    minval: float = Field(allow_inf_nan=False)
    maxval: float = Field(allow_inf_nan=False)
    count: int | None = Field(default=None, ge=1)


class LogHP(ConfigModel):
    """Values ``base ** x`` for x in [minval, maxval] (the bounds are exponents)."""

    type: Literal["log"] = "log"
    minval: float = Field(allow_inf_nan=False)
    maxval: float = Field(allow_inf_nan=False)
    base: float = Field(default=DEFAULT_LOG_BASE, gt=0, allow_inf_nan=False)
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
# The hyperparameters with a range of values (what a search explores).
RangeHP = IntHP | DoubleHP | LogHP | CategoricalHP
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
                problems.append((f"{path}.count", GRID_NEEDS_COUNT))
        if isinstance(hp, LogHP) and hp.base == 1:
            problems.append((f"{path}.base", "must not be 1 (every value would be 1)"))
    return problems


class _Section(ConfigModel):
    """The section alone, located under its name as in a whole config (so messages read the
    same)."""

    hyperparameters: dict[str, Hyperparameter]


_FIELD_NAMES = frozenset(
    name
    for model in (ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP)
    for name in model.model_fields
)


def parse_section(raw: JSONValue) -> HPGroup:
    """A ``hyperparameters:`` section on its own (``None``: empty), validated by the same models
    and checks as in a whole config; ``ConfigError`` (a ``ValueError``) names every bad field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("hyperparameters: must be a mapping", "hyperparameters")
    data = {"hyperparameters": normalize(raw)}
    try:
        group: HPGroup = _Section.model_validate(data).hyperparameters
    except ValidationError as e:
        raise make_error(problems_of(e, data, _FIELD_NAMES)) from None  # type: ignore[arg-type]
    problems = check(group, grid=False)
    if problems:
        raise make_error([at(p, m) for p, m in problems])
    return group


def to_dict(hps: HPGroup) -> JSONObject:
    out: JSONObject = {}
    for name, hp in hps.items():
        if isinstance(hp, dict):
            out[name] = to_dict(hp)
        else:
            out[name] = hp.model_dump(mode="json")
    return out
