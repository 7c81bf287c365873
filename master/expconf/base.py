"""The base model of every config section, and Determined's "length" ({batches: N})."""

from __future__ import annotations

from typing import TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, model_validator

from det.common.jsontypes import JSONObject

_T = TypeVar("_T")


class ConfigModel(BaseModel):
    """Strict, closed config section.

    Determined's schema lets every field be ``null`` meaning "use the default", so null keys are
    dropped before validation. Validation is strict (``"5"`` is not an integer), as the JSON schema
    is; YAML already gives numbers and booleans their types.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: object) -> object:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


@overload
def default_of(model: type[BaseModel], field: str) -> object: ...
@overload
def default_of(model: type[BaseModel], field: str, kind: type[_T]) -> _T: ...
def default_of(model: type[BaseModel], field: str, kind: type[object] = object) -> object:
    """The schema's default of ``model.field``: read it from here rather than typing it again.
    With ``kind``, checked to be one (``default_of(Resources, "slots_per_trial", int)``)."""
    value = model.model_fields[field].get_default(call_default_factory=True)
    if not isinstance(value, kind):
        raise TypeError(f"{model.__name__}.{field}: the default {value!r} is not a {kind}")
    return value


#: A bind mount's (and shared_fs storage's) mount propagation when the config names none.
DEFAULT_PROPAGATION = "rprivate"

LENGTH_UNITS = ("batches", "records", "epochs")


class Length(ConfigModel):
    """A training length in one unit: ``{batches: 100}``, ``{records: 6400}`` or ``{epochs: 2}``."""

    batches: int | None = Field(default=None, ge=0)
    records: int | None = Field(default=None, ge=0)
    epochs: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one_unit(self) -> Length:
        given = [u for u in LENGTH_UNITS if getattr(self, u) is not None]
        if len(given) != 1:
            raise ValueError(
                "must give exactly one of batches, records or epochs"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self

    @property
    def unit(self) -> str:
        return next(u for u in LENGTH_UNITS if getattr(self, u) is not None)

    @property
    def value(self) -> int:
        v = getattr(self, self.unit)
        assert isinstance(v, int)
        return v

    def to_dict(self) -> JSONObject:
        """Only the unit given, as Determined shows it (``{"batches": 0}``)."""
        return {self.unit: self.value}
