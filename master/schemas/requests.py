"""Request messages that carry their defaults: a route reads ``params.trialIds`` and gets ``[]``
when the client sent nothing, instead of re-defaulting with ``params.get(...) or default``.

Each model declares the fields of one of Determined's operations under their wire names (the
same types and limits as the generated message in :mod:`det.master.schemas._determined`, so the
OpenAPI document and the checks stay what they were), each with the value Determined gives it
when it is absent. ``null`` counts as absent. Where Determined reads a zero as "unset" (a
``maxDatapoints`` of 0 means 200), the field says so with :func:`zero_is`; the route sees the
value it acts on. Routes declare them like any message: ``@contract("CompareTrials",
params=CompareTrialsQuery)``.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from det.master.schemas import d
from det.master.schemas._types import Int64, Name

T = TypeVar("T")


class Request(BaseModel):
    """A request message with its defaults: absent and ``null`` fields take them; unknown
    keys are ignored (as for the generated messages)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: object) -> object:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def zero_is(default: T) -> AfterValidator:
    """A field whose zero (or empty) value means ``default``, as Determined reads it."""

    def check(value: T) -> T:
        return value or default

    return AfterValidator(check)


DEFAULT_DATAPOINTS = 200  # Determined's, when maxDatapoints is 0 or unset


class TrialIdsQuery(Request):
    """``GetTrainingMetrics`` / ``GetValidationMetrics``: the trials whose reports stream."""

    trialIds: list[Int64] = []


class MetricsQuery(TrialIdsQuery):
    """``GetMetrics``: the trials, and the group (all groups when unset)."""

    group: Annotated[str | None, zero_is(None)] = None


class CompareTrialsQuery(Request):
    """``CompareTrials``: the trials, which metrics (names of a group or of a legacy metric
    type, or ``group.name`` ids), how many points, over which batches, filtered by
    ``timeSeriesFilter``. The double range of the filter is read from the query string as the
    official client sends it (``timeSeriesFilter.doubleRange.gt``); its generated names are
    kept here so the document lists what Determined's does."""

    trialIds: list[Int64] = []
    metricNames: list[str] = []
    metricIds: list[str] = []
    group: Annotated[str | None, zero_is(None)] = None
    metricType: d.v1MetricType = "METRIC_TYPE_UNSPECIFIED"
    maxDatapoints: Annotated[Int64, zero_is(DEFAULT_DATAPOINTS)] = DEFAULT_DATAPOINTS
    startBatches: Int64 = 0
    endBatches: Annotated[Int64 | None, zero_is(None)] = None
    timeSeriesFilter_doubleRange_gt: float | None = None
    timeSeriesFilter_doubleRange_gte: float | None = None
    timeSeriesFilter_doubleRange_lt: float | None = None
    timeSeriesFilter_doubleRange_lte: float | None = None
    int_gt: Int64 | None = Field(None, alias="timeSeriesFilter.integerRange.gt")
    int_gte: Int64 | None = Field(None, alias="timeSeriesFilter.integerRange.gte")
    int_in: list[Int64] | None = Field(None, alias="timeSeriesFilter.integerRange.incl")
    int_lt: Int64 | None = Field(None, alias="timeSeriesFilter.integerRange.lt")
    int_lte: Int64 | None = Field(None, alias="timeSeriesFilter.integerRange.lte")
    int_not_in: list[Int64] | None = Field(None, alias="timeSeriesFilter.integerRange.notIn")
    name: str | None = Field(None, alias="timeSeriesFilter.name")
    time_gt: str | None = Field(None, alias="timeSeriesFilter.timeRange.gt")
    time_gte: str | None = Field(None, alias="timeSeriesFilter.timeRange.gte")
    time_lt: str | None = Field(None, alias="timeSeriesFilter.timeRange.lt")
    time_lte: str | None = Field(None, alias="timeSeriesFilter.timeRange.lte")


class TrialWorkloadsQuery(Request):
    """``GetTrialWorkloads``: which workloads, in which order, which page."""

    filter: d.GetTrialWorkloadsRequestFilterOption = "FILTER_OPTION_UNSPECIFIED"
    group: str | None = None
    includeBatchMetrics: bool = False
    limit: Int64 = 0
    metricType: d.v1MetricType | None = None
    offset: Int64 = 0
    orderBy: d.v1OrderBy = "ORDER_BY_UNSPECIFIED"
    removeDeletedCheckpoints: bool = False
    sortKey: str | None = None


class JobsQuery(Request):
    """``GetJobs`` / ``GetJobsV2``: a pool's queue (every pool's when unset), which states,
    which order, which page."""

    limit: Int64 = 0
    offset: Int64 = 0
    orderBy: d.v1OrderBy = "ORDER_BY_UNSPECIFIED"
    resourcePool: str | None = None
    states: list[d.jobv1State] = []


class UsersQuery(Request):
    """``GetUsers``: filters (unset: no filter), order and page."""

    active: bool | None = None
    admin: bool | None = None
    limit: Int64 = 0
    name: Name = ""
    offset: Int64 = 0
    orderBy: d.v1OrderBy = "ORDER_BY_UNSPECIFIED"
    roleIdAssignedDirectlyToUser: list[Int64] = []
    sortBy: d.v1GetUsersRequestSortBy = "SORT_BY_UNSPECIFIED"


class AccessTokensQuery(Request):
    """``GetAccessTokens``: whose tokens (the caller's when unset), which, order and page."""

    limit: Int64 = 0
    offset: Int64 = 0
    orderBy: d.v1OrderBy = "ORDER_BY_UNSPECIFIED"
    showInactive: bool = False
    sortBy: d.v1GetAccessTokensRequestSortBy = "SORT_BY_UNSPECIFIED"
    tokenIds: list[Int64] = []
    username: Annotated[Name | None, zero_is(None)] = None
