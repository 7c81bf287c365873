from __future__ import annotations

import pytest

from det.agent.reconcile import (
    UNKNOWN_ALLOCATION_ERROR,
    Actual,
    Desired,
    Plan,
    decide,
    reports,
)
from det.common.states import AllocationState

R, K = "RUN", "KILL"
A, P, S, RU, T = (
    AllocationState.ASSIGNED,
    AllocationState.PULLING,
    AllocationState.STARTING,
    AllocationState.RUNNING,
    AllocationState.TERMINATED,
)


def act(
    alloc: str, state: AllocationState, *, killing: bool = False, logs_done: bool = True
) -> Actual:
    return Actual(alloc, state, container_id=f"c-{alloc}", killing=killing, logs_done=logs_done)


CASES = [
    # (name, desired, actual, expected plan)
    ("unreachable master keeps everything", None, [act("1", RU), act("2", T)], Plan()),
    ("run missing starts it", [Desired("1", R)], [], Plan(start=("1",))),
    ("run running is idempotent", [Desired("1", R)], [act("1", RU)], Plan()),
    ("run while starting waits", [Desired("1", R)], [act("1", P)], Plan()),
    ("run terminated is not restarted", [Desired("1", R)], [act("1", T)], Plan()),
    ("kill running", [Desired("1", K)], [act("1", RU)], Plan(kill=("1",))),
    ("kill while pulling", [Desired("1", K)], [act("1", P)], Plan(kill=("1",))),
    ("kill already under way", [Desired("1", K)], [act("1", RU, killing=True)], Plan()),
    ("kill terminated keeps reporting", [Desired("1", K)], [act("1", T)], Plan()),
    ("kill unknown does nothing", [Desired("1", K)], [], Plan()),
    ("unlisted running is killed", [], [act("1", RU)], Plan(kill=("1",))),
    ("unlisted assigned is killed", [], [act("1", A)], Plan(kill=("1",))),
    ("unlisted terminated is removed", [], [act("1", T)], Plan(remove=("1",))),
    ("unlisted terminated waits for logs", [], [act("1", T, logs_done=False)], Plan()),
    ("unlisted killing is not killed twice", [], [act("1", S, killing=True)], Plan()),
    (
        "mixed",
        [Desired("1", R), Desired("2", K), Desired("3", R), Desired("3", R)],
        [act("2", RU), act("4", RU), act("5", T)],
        Plan(start=("1", "3"), kill=("2", "4"), remove=("5",)),
    ),
]


@pytest.mark.parametrize(
    ("desired", "actual", "plan"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(desired: list[Desired] | None, actual: list[Actual], plan: Plan) -> None:
    assert decide(desired, actual) == plan


def test_reports_every_container_with_exit_code() -> None:
    actual = [
        Actual("1", RU, container_id="c1"),
        Actual("2", T, container_id="c2", exit_code=137),
        Actual("3", T, container_id=None, error="start failed: no such image"),
    ]
    assert reports([Desired("1", R)], actual) == [
        {
            "allocationId": "1",
            "containerId": "c1",
            "state": "RUNNING",
            "exitCode": None,
            "error": None,
        },
        {
            "allocationId": "2",
            "containerId": "c2",
            "state": "TERMINATED",
            "exitCode": 137,
            "error": None,
        },
        {
            "allocationId": "3",
            "containerId": None,
            "state": "TERMINATED",
            "exitCode": None,
            "error": "start failed: no such image",
        },
    ]


def test_kill_of_unknown_allocation_is_reported_terminated_once() -> None:
    out = reports([Desired("9", K), Desired("9", K), Desired("8", R)], [])
    assert out == [
        {
            "allocationId": "9",
            "containerId": None,
            "state": "TERMINATED",
            "exitCode": None,
            "error": UNKNOWN_ALLOCATION_ERROR,
        }
    ]


def test_kill_of_known_allocation_reports_the_container_not_a_synthetic_entry() -> None:
    out = reports([Desired("1", K)], [Actual("1", RU, container_id="c1")])
    assert [(r["allocationId"], r["state"]) for r in out] == [("1", "RUNNING")]


def test_reports_without_an_answer_yet() -> None:
    assert reports(None, [Actual("1", RU)])[0]["state"] == "RUNNING"


def test_an_exit_whose_logs_are_still_shipping_is_reported_terminating() -> None:
    held = Actual("1", T, container_id="c-1", exit_code=3, logs_done=False, holding_end=True)
    done = Actual("2", T, container_id="c-2", exit_code=3, logs_done=True)
    out = {r["allocationId"]: r for r in reports([Desired("1", R), Desired("2", R)], [held, done])}
    assert (out["1"]["state"], out["1"]["exitCode"]) == ("TERMINATING", None)
    assert (out["2"]["state"], out["2"]["exitCode"]) == ("TERMINATED", 3)
