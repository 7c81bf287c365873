"""Request models carry their defaults (det.master.schemas.requests): absent and null fields take
Determined's values, zeros that Determined reads as unset become the value acted on, lists in the
query string are found by their wire names, and bad values still name the field."""

from __future__ import annotations

import pytest
from flask import Flask

from det.master.api._contract import _list_keys, query_dict
from det.master.errors import InvalidArgument
from det.master.schemas import validate
from det.master.schemas.requests import (
    DEFAULT_DATAPOINTS,
    AccessTokensQuery,
    CompareTrialsQuery,
    JobsQuery,
    MetricsQuery,
    TrialWorkloadsQuery,
    UsersQuery,
)


def test_absent_and_null_fields_take_their_defaults() -> None:
    for raw in ({}, {"trialIds": None, "maxDatapoints": None, "metricType": None}):
        q = validate(CompareTrialsQuery, raw, "query")
        assert q.trialIds == [] and q.metricNames == [] and q.metricIds == []
        assert q.maxDatapoints == DEFAULT_DATAPOINTS
        assert q.metricType == "METRIC_TYPE_UNSPECIFIED"
        assert q.startBatches == 0 and q.endBatches is None and q.group is None
    w = validate(TrialWorkloadsQuery, {}, "query")
    assert (w.filter, w.orderBy, w.offset, w.limit) == (
        "FILTER_OPTION_UNSPECIFIED",
        "ORDER_BY_UNSPECIFIED",
        0,
        0,
    )
    assert not w.includeBatchMetrics and not w.removeDeletedCheckpoints


def test_zeros_determined_reads_as_unset_become_the_value_acted_on() -> None:
    q = validate(
        CompareTrialsQuery, {"maxDatapoints": "0", "endBatches": "0", "group": ""}, "query"
    )
    assert (q.maxDatapoints, q.endBatches, q.group) == (DEFAULT_DATAPOINTS, None, None)
    given = validate(CompareTrialsQuery, {"maxDatapoints": "7", "endBatches": "30"}, "query")
    assert (given.maxDatapoints, given.endBatches) == (7, 30)
    assert validate(MetricsQuery, {"group": ""}, "query").group is None


def test_query_lists_are_found_by_their_wire_names() -> None:
    lists = _list_keys(CompareTrialsQuery)
    assert {"trialIds", "metricNames", "timeSeriesFilter.integerRange.incl"} <= lists
    assert "maxDatapoints" not in lists
    app = Flask("requests")
    query = "trialIds=1&trialIds=2&timeSeriesFilter.integerRange.incl=5&timeSeriesFilter.name=epoch"
    with app.test_request_context("/?" + query):
        q = validate(CompareTrialsQuery, query_dict(CompareTrialsQuery), "query")
    assert q.trialIds == [1, 2]
    assert q.int_in == [5] and q.name == "epoch"


def test_a_bad_value_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match=r"query\.maxDatapoints"):
        validate(CompareTrialsQuery, {"maxDatapoints": "many"}, "query")
    with pytest.raises(InvalidArgument, match=r"query\.filter"):
        validate(TrialWorkloadsQuery, {"filter": "FILTER_OPTION_EVERYTHING"}, "query")


def test_list_queries_default_to_everything_from_the_start() -> None:
    jobs = validate(JobsQuery, {"states": None}, "query")
    assert (jobs.states, jobs.resourcePool, jobs.offset, jobs.limit) == ([], None, 0, 0)
    people = validate(UsersQuery, {"name": None, "sortBy": None}, "query")
    assert (people.name, people.sortBy, people.active, people.admin) == (
        "",
        "SORT_BY_UNSPECIFIED",
        None,
        None,
    )
    tokens = validate(AccessTokensQuery, {"username": "", "showInactive": None}, "query")
    assert (tokens.username, tokens.showInactive, tokens.tokenIds) == (None, False, [])
    assert _list_keys(JobsQuery) >= {"states"} and _list_keys(AccessTokensQuery) >= {"tokenIds"}
