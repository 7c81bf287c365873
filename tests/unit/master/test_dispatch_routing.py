"""Which connections a front process keeps (agents, tasks, health checks) and which it hands to
the user processes (det.master.dispatch.cluster_traffic); the relay of an HTTPS connection."""

from __future__ import annotations

import socket
import threading

from waitress.buffers import OverflowableBuffer

from det.master.dispatch import Relay, cluster_traffic

AGENT_TOKEN = "a" * 64


def head(line: str, *headers: str) -> bytes:
    return "\r\n".join([line, "Host: m:8080", *headers]).encode()


def test_health_checks_and_heartbeats_stay() -> None:
    assert cluster_traffic(head("GET /info HTTP/1.1"), AGENT_TOKEN)
    assert cluster_traffic(head("GET /health?x=1 HTTP/1.1"), AGENT_TOKEN)
    assert cluster_traffic(head("POST /api/v1/agents/a-1/heartbeat HTTP/1.1"), AGENT_TOKEN)
    assert cluster_traffic(b"\r\n" + head("GET /info HTTP/1.1"), AGENT_TOKEN)


def test_tasks_and_the_agent_stay() -> None:
    task = "Grpc-Metadata-x-allocation-token: Bearer t0k"
    assert cluster_traffic(head("POST /api/v1/trials/3/metrics HTTP/1.1", task), AGENT_TOKEN)
    assert cluster_traffic(head("GET /x HTTP/1.1", task.upper()), AGENT_TOKEN)
    agent = f"Authorization: bearer  {AGENT_TOKEN}"
    assert cluster_traffic(head("GET /api/v1/agents/a-1/containers HTTP/1.1", agent), AGENT_TOKEN)


def test_users_go() -> None:
    user = "Authorization: Bearer some-user-session"
    assert not cluster_traffic(
        head("GET /api/v1/experiments?limit=100 HTTP/1.1", user), AGENT_TOKEN
    )
    assert not cluster_traffic(
        head("GET /api/v1/allocations/a/signals/preemption?timeout_seconds=30 HTTP/1.1", user),
        AGENT_TOKEN,
    )
    assert not cluster_traffic(head("POST /api/v1/auth/login HTTP/1.1"), AGENT_TOKEN)
    # A token that only begins like the agent's is a user's (or nobody's).
    partial = f"Authorization: Bearer {AGENT_TOKEN[:-1]}"
    assert not cluster_traffic(head("GET /api/v1/agents HTTP/1.1", partial), AGENT_TOKEN)
    # The path of a health check in the query string is no health check.
    assert not cluster_traffic(head("GET /api/v1/experiments?next=/info HTTP/1.1"), AGENT_TOKEN)


def test_a_malformed_request_line_stays_for_waitress_to_answer() -> None:
    assert cluster_traffic(b"GARBAGE", AGENT_TOKEN)
    assert cluster_traffic(head("GET /api/v1/experiments"), AGENT_TOKEN)


class _Channel:
    """What a Relay touches of a front's TLS channel."""

    def __init__(self) -> None:
        self._map: dict[int, object] = {}
        self.outbufs = [OverflowableBuffer(1 << 20)]
        self.outbuf_lock = threading.Condition()
        self.total_outbufs_len = 0
        self.close_when_flushed = False
        self.will_close = False

    def sent(self) -> bytes:
        return b"".join(bytes(b.get(len(b))) for b in self.outbufs)


def test_a_relay_forwards_all_a_user_process_sent_before_it_closed() -> None:
    ours, theirs = socket.socketpair()
    channel = _Channel()
    relay = Relay(channel, ours)
    answer = bytes(range(256)) * 400  # 100 KiB: more than one read, less than the socket holds
    theirs.sendall(answer)
    theirs.close()  # the user process answers with "Connection: close" and closes
    relay.handle_read()  # poll reports the data and the hang-up together: one read, ...
    assert 0 < len(channel.sent()) < len(answer)
    relay.handle_close()  # ... then the hang-up, with the rest of the answer still unread
    assert channel.sent() == answer
    assert channel.close_when_flushed and not channel.will_close
    assert relay.channel is None and ours.fileno() == -1
