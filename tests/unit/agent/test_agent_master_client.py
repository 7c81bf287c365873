"""The agent's client over the shared REST client: what each kind of failure becomes
(det.agent.errors). A 4xx is the master saying no, never "the master is unavailable"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from det.agent.errors import AgentError, AgentMasterError, MasterRejected, MasterUnavailable
from det.agent.master_client import MasterClient
from tests.fakes.master import FakeMaster


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster().start()
    yield m
    m.stop()


def test_a_wrong_token_is_a_rejection_not_an_outage(master: FakeMaster) -> None:
    client = MasterClient(master.url, "not-the-token")
    with pytest.raises(AgentMasterError) as e:
        client.heartbeat("a1", {"resourcePool": "default", "slots": [], "containers": []})
    assert isinstance(e.value, MasterRejected) and e.value.status == 401
    assert not isinstance(e.value, MasterUnavailable)
    assert "bad agent token" in str(e.value)
    assert master.rejected_auth == 1  # one attempt: the daemon owns the retry policy


def test_a_master_that_does_not_answer_is_unavailable(master: FakeMaster) -> None:
    master.down = True
    client = MasterClient(master.url, master.token)
    with pytest.raises(MasterUnavailable) as e:
        client.heartbeat("a1", {"resourcePool": "default", "slots": [], "containers": []})
    assert str(e.value).startswith("POST /api/v1/agents/a1/heartbeat: ")


def test_a_5xx_is_unavailable(master: FakeMaster) -> None:
    master.fail_log_posts = 1
    client = MasterClient(master.url, master.token)
    with pytest.raises(MasterUnavailable, match="500"):
        client.post_logs([{"log": "x"}])
    client.post_logs([{"log": "x"}])  # the next one goes through


def test_every_agent_error_has_the_one_root() -> None:
    import det.agent.errors as errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) >= 9
    assert all(issubclass(c, AgentError) for c in classes)
    assert not issubclass(MasterRejected, MasterUnavailable)
