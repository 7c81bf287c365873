"""Schemathesis against the master's own OpenAPI document: every operation, inputs drawn from
its declared request body and query parameters (valid and not).

No answer may be a 5xx (but a deliberate 501 for a Determined feature det does not build), a refused request (4xx) may change nothing in the database, and a 2xx
body must match the response schema the document declares
(the same types the master validates with, generated from Determined's bindings). Runs on the
body fuzzer's world (test_master_fuzz.py's ``make_world``: a running trial, a model, a second
user) on a master served on a real port by a thread of the test's process, with its control
loop (``threaded_master``, tests/integration/threaded.py), as the admin: a followed log stream
is read until the client's read timeout, which needs a socket (the body fuzzer closes such
answers unread and runs on the master's app without a port). A new log level (PATCH
/api/v1/master/config) is applied by the process that answers it, the test's here: the root
logger's level is given back at the end. Operations that would end the admin's own session (logout, its password,
deactivating users) are left out; their refusals are covered by the authorization tests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis.errors import _WrappedBaseException
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.integration.ntsc_support import stop_launched
from tests.integration.test_master_fuzz import (
    MASTER_EXTRA,
    World,
    _fingerprint,
    fuzz_database,
    make_world,
)
from tests.integration.threaded import threaded_master

pytestmark = pytest.mark.integration

# Calls that would end the fuzzing session itself.
_SKIP = re.compile(
    r"^(POST /api/v1/auth/logout|POST /api/v1/users/\{[^}]+\}/password|PATCH /api/v1/users/"
    r"|POST /api/v1/users/\{[^}]+\}/(deactivate|activate)|DELETE /api/v1/tokens|PATCH /api/v1/tokens)"
)
EXAMPLES = 12


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, pg_server: str, pg_template: str
) -> Iterator[World]:
    import logging

    root = logging.getLogger()
    level = root.level
    with (
        fuzz_database(pg_server, pg_template) as db_url,
        threaded_master(tmp_path_factory.mktemp("fuzz"), db_url, MASTER_EXTRA, loop=True) as m,
    ):
        try:
            yield from make_world(m, db_url)
        finally:
            root.setLevel(level)


def _deliberate_501(response: Any) -> bool:
    """A feature det deliberately does not build: 501 with Determined's error shape (code 12,
    UNIMPLEMENTED) and a message naming it. Not a server error."""
    if response.status_code != 501:
        return False
    body = response.json()
    return body.get("code") == 12 and bool(body.get("message"))


def _operations(doc: dict[str, Any]) -> list[str]:
    out = []
    for path, methods in doc["paths"].items():
        for method in methods:
            label = f"{method.upper()} {path}"
            if not _SKIP.match(label):
                out.append(label)
    return sorted(out)


def _test_of(op: Any, label: str, w: World, calls: list[Any], failures: list[str]) -> Any:
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[hypothesis.Phase.generate],
    )
    @hypothesis.given(case=op.as_strategy())
    def run(case: Any) -> None:
        before = _fingerprint(w.db_url)
        follow = str((case.query or {}).get("follow", "")).lower() == "true"
        try:
            response = case.call(base_url=w.m.url, session=w.admin, timeout=5 if follow else 60)
        except Exception as e:  # schemathesis wraps requests' ReadTimeout in its own error
            if follow and "Read timed out" in str(
                e
            ):  # a followed log stream stays open until its task ends: as documented
                calls.append((label, 200))
                return
            raise
        calls.append((label, response.status_code))
        if 400 <= response.status_code < 500:
            changed = sorted(k for k, v in _fingerprint(w.db_url).items() if before.get(k) != v)
            if changed:
                failures.append(f"{label}: refused ({response.status_code}) but changed {changed}")
                raise AssertionError(changed)
        try:
            assert response.status_code < 500 or _deliberate_501(response), (
                f"{response.status_code}: {response.text[:300]}"
            )
            case.validate_response(response, checks=[response_schema_conformance])
        except Exception as e:
            failures.append(f"{label}: {str(e).strip()[:400]}")
            raise
        if 200 <= response.status_code < 300:
            stop_launched(w.admin, w.m.url, label, response)

    return run


# The operations are checked in PARTS tests, each a slice of the sorted list, so each stays well
# inside the suite's per-test timeout (600 s). As one test, the whole list took 84 s on a quiet
# machine and over 600 s at load average 15: the timeout fired inside whichever operation's
# Hypothesis run was under way, which reported it as that operation's flaky run (FlakyFailure;
# FlakyStrategyDefinition when it lands inside a draw) and the loop went on.
PARTS = 12


@pytest.mark.parametrize("part", range(PARTS))
def test_every_operation_answers_without_a_5xx_and_as_declared(world: World, part: int) -> None:
    doc = world.admin.get(world.m.url + "/api/v1/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(doc)
    failures: list[str] = []
    calls: list[tuple[str, int]] = []
    every = _operations(doc)
    assert len(every) > 100, every
    labels = every[part::PARTS]
    for label in labels:
        op = schema.find_operation_by_label(label)
        assert op is not None, label
        try:
            _test_of(op, label, world, calls, failures)()
        except Exception as e:  # the first failing example of each operation is kept
            inner = getattr(e, "exceptions", ())
            if any(isinstance(x, _WrappedBaseException) for x in inner):
                raise  # not the operation's failure: the test's timeout or an interrupt
            if not failures or not failures[-1].startswith(label):
                # Hypothesis's FlakyFailure is a group: say what failed inside it.
                detail = "; ".join(f"{type(x).__name__}: {str(x).strip()[:300]}" for x in inner)
                failures.append(
                    f"{label}: {type(e).__name__}: {str(e).strip()[:400]}"
                    + (f" [{detail}]" if detail else "")
                )
    # Every operation was called (an operation whose inputs cannot be drawn is a failure above).
    never_called = set(labels) - {label for label, _ in calls} - {f.split(":")[0] for f in failures}
    assert not never_called, sorted(never_called)
    print(
        f"schemathesis: {len(calls)} calls, statuses {sorted(Counter(s for _, s in calls).items())}"
    )
    assert not failures, "\n".join(sorted(set(failures)))
