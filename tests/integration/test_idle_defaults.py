"""The master's idle timeouts for interactive tasks (Determined's ``tensorboard_timeout``, 300 s
by default, and ``notebook_timeout``, off by default), under a task's own ``idle_timeout``: the
idle pass on the real database, with each task's proxy clock set back by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from det.master import config as master_config
from det.master.db import open_pool, upgrade
from det.master.handles import MasterState
from det.master.services import idle, ntsc


def _state(pg_url: str, **cfg: Any) -> MasterState:
    pool = open_pool(pg_url, min_size=1, max_size=4)
    return MasterState(
        master_config.parse_config(cfg), pool, "cluster-1", "agent-tok", "secret", "master-1"
    )


@pytest.fixture
def db(pg_url: str) -> Iterator[str]:
    upgrade(pg_url)
    st = _state(pg_url)
    with st.pool.connection() as conn:
        conn.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
    st.pool.close()
    yield pg_url


def _task(st: MasterState, kind: ntsc.TaskKind, idle_seconds: int, **raw: Any) -> str:
    """A task whose container is ready (it has a proxy address) and that no request has
    reached for ``idle_seconds``."""
    with st.pool.connection() as conn:
        owner = conn.execute("SELECT id FROM users WHERE username = 'u'").fetchone()
        assert owner is not None
        row = ntsc.launch(
            conn,
            st,
            kind=kind,
            owner_id=owner["id"],
            config=ntsc.resolve_config(st, kind, raw),
            files=[],
        )
        conn.execute(
            "UPDATE ntsc_tasks SET proxy_address = '127.0.0.1:1',"
            " last_activity = now() - make_interval(secs => %s) WHERE id = %s",
            (idle_seconds, row["id"]),
        )
    return str(row["id"])


def _exit_status(st: MasterState, task_id: str) -> str | None:
    with st.pool.connection() as conn:
        row = conn.execute(
            "SELECT exit_status FROM ntsc_tasks WHERE id = %s", (task_id,)
        ).fetchone()
    assert row is not None
    return row["exit_status"]  # type: ignore[no-any-return]


def _idle_pass(st: MasterState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "_last_run", 0.0)  # the pass runs at most every 5 s
    idle.idle_pass(st)


def test_a_tensorboard_idle_past_the_default_300_s_is_killed(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = _state(db)
    try:
        old = _task(st, "TENSORBOARD", 400)
        recent = _task(st, "TENSORBOARD", 200)
        own = _task(st, "TENSORBOARD", 400, idle_timeout="1000s")
        # Notebooks have no default: one idle for a day stays.
        notebook = _task(st, "NOTEBOOK", 86_400, notebook_idle_type="activity")
        _idle_pass(st, monkeypatch)
        assert _exit_status(st, old) == "killed: idle for more than 300 s (tensorboard_timeout)"
        assert _exit_status(st, recent) is None
        assert _exit_status(st, own) is None  # the task's own idle_timeout wins
        assert _exit_status(st, notebook) is None
    finally:
        st.pool.close()


def test_the_master_config_sets_or_turns_off_the_defaults(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = _state(db, tensorboard_timeout=0, notebook_timeout=60)
    try:
        tensorboard = _task(st, "TENSORBOARD", 86_400)
        notebook = _task(st, "NOTEBOOK", 120, notebook_idle_type="activity")
        fresh = _task(st, "NOTEBOOK", 10, notebook_idle_type="activity")
        _idle_pass(st, monkeypatch)
        assert _exit_status(st, tensorboard) is None  # 0: never
        assert _exit_status(st, notebook) == "killed: idle for more than 60 s (notebook_timeout)"
        assert _exit_status(st, fresh) is None
    finally:
        st.pool.close()


def test_a_negative_timeout_is_refused_naming_the_key() -> None:
    with pytest.raises(master_config.MasterConfigError, match="tensorboard_timeout"):
        master_config.parse_config({"tensorboard_timeout": -1})
