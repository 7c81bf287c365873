"""scripts/check_layers.py (run by ``make check``): no state column written outside
master/states.py, no SQL in master/api/; it holds on this tree and fails on a violation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_layers.py"


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_keeps_the_rules() -> None:
    r = _run(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 violation(s)" in r.stdout


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_state_write_outside_the_state_module_and_sql_in_a_route_fail(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "master/states.py",
        'SQL = "UPDATE trials SET state = %s WHERE id = %s"\n',
    )
    _write(
        tmp_path,
        "master/services/jobs.py",
        "def f(conn):\n"
        "    conn.execute(\n"
        '        "UPDATE allocations a SET placement = %s,"\n'
        "        \" state = 'ASSIGNED' WHERE a.id = %s\",\n"
        "    )\n"
        '    conn.execute("UPDATE experiments SET searcher_state = %s WHERE id = %s")\n'
        '    conn.execute("UPDATE trials SET x = 1 WHERE state = %s")\n'
        "    conn.execute(\"SELECT 1 FROM trials WHERE state IN ('COMPLETED','ERROR')\")\n"
        "    conn.execute(\"SELECT 1 FROM e WHERE state NOT IN ('ERROR', 'COMPLETED',"
        " 'DELETING', 'CANCELED')\")\n",
    )
    _write(
        tmp_path,
        "agent/x.py",
        'Q = "INSERT INTO i (id, state) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE"'
        ' + " SET state = EXCLUDED.state"\n',
    )
    _write(tmp_path, "master/api/things.py", "def g(conn):\n    return conn.execute('SELECT 1')\n")
    r = _run(tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[-1] == "check_layers: 4 violation(s)"
    assert lines[0].startswith("master/services/jobs.py:3: a state column written outside")
    assert "SET placement = %s, state = 'ASSIGNED'" in lines[0]
    assert lines[1].startswith("master/services/jobs.py:9: the terminal states typed out")
    assert lines[2].startswith("agent/x.py:1: a state column written outside master/states.py")
    assert lines[3].startswith("master/api/things.py:2: SQL in the API layer")
