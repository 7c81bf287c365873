"""bench/profile_top.py: py-spy's raw stacks summed into own and inclusive shares."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "bench" / "profile_top.py"
_SPEC = importlib.util.spec_from_file_location("bench_profile_top", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
profile_top = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(profile_top)
frame_name, parse, top = profile_top.frame_name, profile_top.parse, profile_top.top

RAW = [
    'process 7:"det-master";thread (0x1);serve (det/master/api/agents.py:30);'
    "heartbeat (det/master/services/agents.py:40);execute (psycopg/cursor.py:97) 6",
    'process 7:"det-master";thread (0x1);serve (det/master/api/agents.py:30);'
    "heartbeat (det/master/services/agents.py:52) 2",
    'process 7:"det-master";thread (0x2);poll (/usr/lib/python3.11/selectors.py:415) 2',
    "not a stack line",
]


def test_a_frame_is_named_by_file_and_function_without_its_line() -> None:
    assert frame_name("execute (psycopg/cursor.py:97)") == "psycopg/cursor.py:execute"
    assert (
        frame_name("poll (/x/lib/python3.11/site-packages/psycopg/waiting.py:3)")
        == "psycopg/waiting.py:poll"
    )
    assert frame_name("<module>") == "<module>"


def test_shares_count_each_sample_once_per_function() -> None:
    stacks = parse(RAW)
    total, own, inclusive = top(stacks, "det/")
    assert total == 10
    assert own[0] == ("psycopg/cursor.py:execute", 6)
    assert dict(own)["det/master/services/agents.py:heartbeat"] == 2
    # Two lines of one function on one stack count once; a thread's other frames are not det's.
    assert dict(inclusive) == {
        "det/master/api/agents.py:serve": 8,
        "det/master/services/agents.py:heartbeat": 8,
    }
