"""The top of py-spy raw profiles (``--format raw``: one collapsed stack and its sample count
a line), as shares of all samples: each function's own share (its frame on top of the stack)
and its inclusive share (anywhere on the stack, counted once a sample), for the master's code
and in all. Shares, not times: they hold on a loaded machine as long as the samples are many.

    .venv/bin/python bench/profile_top.py DIR_OR_FILES... [--top 25] [--match det]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Iterable
from pathlib import Path

# "func (path/to/file.py:123)" -> "path/to/file.py:func" (lines dropped: one entry a function)
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{m.group('func')}"


def parse(lines: Iterable[str]) -> collections.Counter[tuple[str, ...]]:
    """Stacks (outermost first, thread frame dropped) -> samples."""
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        stacks[tuple(frame_name(f) for f in frames)] += int(count)
    return stacks


def top(
    stacks: collections.Counter[tuple[str, ...]], match: str
) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """(all samples, own samples by function, inclusive samples by function matching ``match``)."""
    total = sum(stacks.values())
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for stack, n in stacks.items():
        if stack:
            own[stack[-1]] += n
        for name in set(stack):
            if match in name:
                inclusive[name] += n
    return total, own.most_common(), inclusive.most_common()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--match", default="det/", help="inclusive shares of frames whose name has it")
    args = ap.parse_args()
    files = [f for p in args.paths for f in (sorted(p.glob("*.txt")) if p.is_dir() else [p])]
    if not files:
        sys.exit("no profiles (*.txt) in " + ", ".join(map(str, args.paths)))
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for f in files:
        stacks.update(parse(f.read_text().splitlines()))
    total, own, inclusive = top(stacks, args.match)
    print(f"{total} samples in {len(files)} profile(s)")
    print("\nown (the frame on top of the stack):")
    for name, n in own[: args.top]:
        print(f"  {100 * n / total:5.1f}%  {name}")
    print(f"\ninclusive (anywhere on the stack), frames matching {args.match!r}:")
    for name, n in inclusive[: args.top]:
        print(f"  {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
