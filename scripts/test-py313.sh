#!/usr/bin/env bash
# The unit tests on Python 3.13 (Debian trixie), beside the main run on 3.11.
#
# The container (det-base:trixie: python3 + python3-venv, nothing else) has no network: its
# wheels are downloaded on this machine into a cache, its venv lives in that cache too and is
# rebuilt only when pyproject.toml changes; det itself is a wheel of this checkout, built and
# reinstalled every run. A copy of the checkout is mounted read-only.
#
# Left out on 3.13: the harness tests that import torch (tests/unit/harness/
# test_examples_offcluster.py, test_harness_examples_on_master.py and
# test_harness_launch.py::test_torch_distributed_runs_one_worker_per_slot), and the agent
# bootstrap's tests (a bash script that needs curl, which the bare image lacks; no Python), and
# the env-file test that asks systemd-analyze, the WebUI polling tests (node) and the host-address
# comparison (iproute2). PyPI's torch wheels for
# cp313 are the CUDA builds (several GB of nvidia-* wheels); the CPU build comes from
# download.pytorch.org, which CI cannot reach. Everything else in tests/unit runs, and
# DET_NO_SKIPS=1 makes a skip fail.
#
# Usage: scripts/test-py313.sh [PYTEST ARGS...]   (default: -n 2 --dist loadfile tests/unit: two
# workers, as the main run spreads its files)
# Env: DET_PY313_CACHE (default .cache/py313), PYTHON (host python with pip; default .venv).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="det-base:trixie"
CACHE="${DET_PY313_CACHE:-$REPO/.cache/py313}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
TORCH_TESTS=(tests/unit/harness/test_examples_offcluster.py tests/unit/harness/test_harness_examples_on_master.py)

log() { printf '[py313] %s\n' "$*"; }
die() { printf '[py313] error: %s\n' "$*" >&2; exit 1; }
START=$SECONDS
mark() { log "$1 ($((SECONDS - START)) s so far)"; }

command -v docker >/dev/null || die "docker not found"
docker image inspect "$IMAGE" >/dev/null 2>&1 ||
  die "image $IMAGE missing: build it with 'bash infra/build-images.sh trixie'"
[[ -x "$PYTHON" ]] || die "no host python at $PYTHON (set PYTHON)"
mkdir -p "$CACHE/wheels" "$CACHE/det"
# One run at a time per cache (it may be shared by checkouts: .ci/run keeps it outside the
# clone): the wheel, the venv and the reinstall of det into it are not for two at once.
exec 9>"$CACHE/.lock"
flock 9

# 1. A copy of the checkout (the files git tracks or would track: no build/, no stale
# *.egg-info that would shadow the installed det), and det's wheel built from it.
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
git -C "$REPO" ls-files -z -co --exclude-standard |
  tar -C "$REPO" --null -T - --ignore-failed-read --warning=none -c | tar -C "$src" -x
rm -f "$CACHE"/det/det_platform-*.whl
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$CACHE/det" "$src" 2>&1 | grep -v '^WARNING: Location' || true
# The build leaves det.egg-info in the copy: it would shadow the installed det's metadata.
rm -rf "$src"/*.egg-info "$src/build"
wheel="$(ls "$CACHE"/det/det_platform-*.whl 2>/dev/null | head -1)"
[[ -n "$wheel" ]] || die "could not build det's wheel"
mark "det wheel built"

# 2. Wheels for cp313, once per pyproject.toml. pip evaluates environment markers with the
# interpreter it runs on (3.11 here), so det's own requirements are first evaluated for 3.13
# here; the rest of the tree is resolved by pip for the 3.13 platform tags.
# Bump CACHE_VERSION when the way the wheels or the venv are made changes.
CACHE_VERSION=1
key="$( (cat "$REPO/pyproject.toml"; echo "$CACHE_VERSION") | sha256sum | cut -c1-12)"
if [[ ! -f "$CACHE/wheels/.complete-$key" ]]; then
  "$PYTHON" - "$wheel" >"$CACHE/requirements-313.txt" <<'EOF'
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

env = {"python_version": "3.13", "python_full_version": "3.13.5", "implementation_version": "3.13.5"}
with zipfile.ZipFile(sys.argv[1]) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(zf.read(name).decode())
reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
todo, seen, out = ["", "dev"], set(), set()
while todo:
    extra = todo.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for r in reqs:
        if r.marker is not None and not r.marker.evaluate({**env, "extra": extra}):
            continue
        if r.marker is None and extra != "":
            continue
        if r.name in ("det", "det-platform"):
            todo.extend(r.extras)
        else:
            out.add(str(Requirement(f"{r.name}{''.join('[' + ','.join(sorted(r.extras)) + ']' if r.extras else '')}{r.specifier}")))
print("\n".join(sorted(out)))
EOF
  log "downloading cp313 wheels ($(wc -l <"$CACHE/requirements-313.txt") requirements of det-platform[dev], torch excluded)"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$CACHE/wheels" \
    --find-links "$CACHE/wheels" --only-binary=:all: --python-version 3.13 --implementation cp \
    --abi cp313 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -r "$CACHE/requirements-313.txt" 2>&1 |
    grep -v '^WARNING: Location' || true
  rm -f "$CACHE"/wheels/.complete-* "$CACHE"/venv/.complete-*
  touch "$CACHE/wheels/.complete-$key"
  mark "wheels downloaded"
fi

# 3. In the container: the venv (once per key), det's wheel, then pytest. No network.
ignores=()
for t in "${TORCH_TESTS[@]}"; do ignores+=("--ignore=$t"); done
ignores+=("--deselect=tests/unit/harness/test_harness_launch.py::test_torch_distributed_runs_one_worker_per_slot")
# The agent bootstrap is a bash script run with curl (absent from the bare image): no Python there.
ignores+=("--ignore=tests/unit/master/provisioner/test_provisioner_bootstrap.py")
# The env-file check asks systemd's own parser (systemd-analyze, absent from the bare image): the
# main run on the host does it; the file it checks is written by pure Python, tested here too.
ignores+=("--deselect=tests/unit/deploy/test_deploy_userdata.py::test_env_file_is_read_back_by_systemd")
# Checks of the checkout itself, not of Python: the instructions in every tracked file (git
# lists them; the image has no git and /src is a copy) and wheels built from a source tree (det
# is installed here from its wheel, with no build tools): the main run on the host does them.
ignores+=("--ignore=tests/unit/test_install_names.py")
# Tools the bare image lacks, whose tests are about the tool's answer, not Python's: node (the
# WebUI's polling script runs under it) and iproute2 (the host's addresses are compared with
# `ip -j addr`; with --network none there is only loopback to compare anyway).
ignores+=("--ignore=tests/unit/master/test_webui_polling.py")
ignores+=("--deselect=tests/unit/master/test_egress.py::test_host_addresses_are_every_interface_address")
ignores+=("--deselect=tests/unit/deploy/test_deploy_release_build.py::test_a_file_gone_from_the_source_is_not_shipped_from_a_stale_build_dir")
ignores+=("--deselect=tests/unit/deploy/test_deploy_release_build.py::test_two_builds_in_one_tree_take_turns")
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(-n 2 --dist loadfile tests/unit)
docker run --rm --network none \
  -v "$src:/src:ro" -v "$CACHE:/cache" -w /src \
  -e DET_NO_SKIPS=1 -e KEY="$key" -e WHEEL="/cache/det/$(basename "$wheel")" \
  "$IMAGE" bash -euo pipefail -c '
    python3 --version
    if [[ ! -f /cache/venv/.complete-$KEY ]]; then
      rm -rf /cache/venv
      python3 -m venv /cache/venv
      /cache/venv/bin/pip install --quiet --disable-pip-version-check --no-index --no-compile \
        --find-links /cache/wheels "$WHEEL[dev]"
      touch /cache/venv/.complete-$KEY
    fi
    /cache/venv/bin/pip install --quiet --disable-pip-version-check --no-index --no-deps \
      --no-compile --force-reinstall "$WHEEL"
    exec /cache/venv/bin/python -m pytest -q -p no:cacheprovider "$@"
  ' py313 "${ignores[@]}" "${args[@]}"
mark "done"
