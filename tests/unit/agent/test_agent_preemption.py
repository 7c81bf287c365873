from __future__ import annotations

import pytest

from det.agent.preemption import NoticePoller, load_notice_source


class Script:
    """A notice source (our own interface) answering from a list, raising for Exception items."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.calls = 0

    def check(self) -> dict[str, str] | None:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]


def test_notice_appears_after_a_failed_check_and_sticks() -> None:
    notice = {"source": "aws-spot", "deadline": "2026-01-01T00:02:00Z"}
    source = Script([None, OSError("metadata timeout"), notice, None])
    poller = NoticePoller(source, interval=60)
    poller.poll_once()
    assert poller.current() is None
    poller.poll_once()  # the error is swallowed
    assert poller.current() is None
    poller.poll_once()
    assert poller.current() == notice
    poller.poll_once()
    assert poller.current() == notice
    assert source.calls == 3  # no more polling once the machine is known to be going


def test_missing_cloud_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "det.agent.notice_gcp", None)
    with pytest.raises(RuntimeError, match=r"notice_gcp\.GcpPreemptionNotice"):
        load_notice_source("gcp", "http://127.0.0.1:9")
