#!/usr/bin/env bash
# mypy cannot follow setup.py's folder -> `det` namespace mapping, so build a tree of symlinks
# with the installed layout (det/, det/master, …) for `mypy -p det`.
set -euo pipefail
out=${1:-build/mypy}
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"
mkdir -p "$out/det"
for f in "$root"/harness/*; do
  case "$f" in *__pycache__*) continue ;; esac
  ln -s "$f" "$out/det/"
done
for pkg in master agent cli deploy; do
  ln -s "$root/$pkg" "$out/det/$pkg"
done
