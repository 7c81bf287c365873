"""Checks a master's recorded answers (``DET_WIRE_LOG``, see det.master.api._wirelog) with the
official client's generated bindings: run it with the official venv's Python.

    .cache/determined-0.38.1/bin/python tests/compat/check_wire.py DIR

Every recorded body must be parsed by its message's ``from_json`` (a streamed line's ``result``
by the operation's response message), as the official CLI and SDK parse them. Prints one line
per operation (answers checked, failures) and the first failures with their error; exits 1 if
any body fails, 2 if nothing was recorded.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

SHOW = 3  # failures shown per operation


def check_line(bindings: Any, entry: dict[str, Any]) -> str | None:
    """None if the official bindings parse ``entry``'s body, else the error."""
    cls = getattr(bindings, entry["message"], None)
    if cls is None:
        return f"no message {entry['message']} in the official bindings"
    body = entry["body"]
    if entry.get("stream"):
        if not isinstance(body, dict) or "result" not in body:
            return f"a streamed line without 'result': {str(body)[:200]}"
        body = body["result"]
    try:
        cls.from_json(body)
    except Exception as e:  # whatever the generated parser raises is a non-conformance
        return f"{type(e).__name__}: {e}"
    return None


def main(argv: list[str]) -> int:
    from determined.common.api import bindings

    folder = Path(argv[0])
    checked: collections.Counter[str] = collections.Counter()
    failed: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(folder.glob("wire-*.ndjson")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue  # a line cut short by a killed master
            op = entry["op"]
            checked[op] += 1
            error = check_line(bindings, entry)
            if error is not None:
                failed[op].append(f"{error}\n      body: {json.dumps(entry['body'])[:300]}")
    if not checked:
        print(f"check_wire: nothing recorded in {folder}")
        return 2
    for op in sorted(checked):
        mark = f"{len(failed[op])} FAILED" if failed.get(op) else "ok"
        print(f"{op:40} {checked[op]:6} answers  {mark}")
        for text in failed.get(op, [])[:SHOW]:
            print(f"    {text}")
    total = sum(len(v) for v in failed.values())
    print(
        f"check_wire: {sum(checked.values())} answers of {len(checked)} operations, {total} failed"
    )
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
