"""What training code may report as metrics: values that are JSON, or numpy / torch scalars,
which a report sends as their Python numbers (``det.core._train``, ``det.core._tensorboard``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol, Union, runtime_checkable

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from ..common.jsontypes import JSONValue


@runtime_checkable
class SupportsItem(Protocol):
    """A numpy or torch scalar (or a one-element array): ``item()`` gives its Python number."""

    def item(self) -> object: ...


# ``typing`` spellings: the harness runs on Python 3.8 in task images.
#: One reported value.
MetricValue = Union["JSONValue", SupportsItem]
#: A report's metrics as training code passes them (a ``Mapping``: a ``dict[str, float]`` is one).
Metrics = Mapping[str, MetricValue]
