#!/usr/bin/env bash
# Runs det's test suite: `bash scripts/test.sh [pytest arguments]`.
#
# On a fresh Debian/Ubuntu machine it first does what .ci/run does before the tests, with the same
# functions (scripts/lib.sh), each step skipped when its result is already there (a re-run costs
# about a second):
#   1. the system packages of DET_APT_PACKAGES (docker.io, mmdebstrap, debootstrap, chromium,
#      nginx, docker-registry, ...) with apt-get, the missing ones only, as root or with sudo;
#      neither: it prints the one install line and the tests that need them skip (README.md)
#   2. starts dockerd when no Docker engine answers (root or sudo)
#   3. .venv with det-platform[dev] and torch (the harness tests train small models), and
#   4. beside it, with a Docker engine, the images the tests run (infra/build-images.sh, as root:
#      its Debian root file systems need it), when one is missing or older than the harness.
# Without a Docker engine the Docker and e2e tests are skipped.
# Then runs pytest (the same as `make test`) in DET_TEST_WORKERS parallel processes (default 4:
# many tests wait on masters, agents and containers rather than compute; on 2 cores, 4 kept the
# CPU busy 94% of the run against 86% with 3, and 5 were slower again, by contention (the
# figures: docs/testing.md); a test file stays in one process, so module fixtures are shared as
# before; 0 runs it serially), plus DET_TEST_WAITING_LANES (default 1) processes that take only
# the files that mostly wait (tests/durations.json's "waiting": a cloud's simulated clock, a
# scheduled wake-up), so the others spend no wall time on them (tests/xdist_schedule.py);
# "no tests collected" (exit 5) is a failure.
# Environment: DET_TEST_VENV (default .venv), TORCH_VERSION (default 2.13.0), DET_TEST_WORKERS,
#              DET_TEST_WAITING_LANES, DET_TEST_APT=0 (never run apt-get or start dockerd: only
#              say what is missing).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/lib.sh
source "$REPO/scripts/lib.sh"
VENV="${DET_TEST_VENV:-$REPO/.venv}"

# Root, or sudo without a password, or sudo that may ask on this terminal.
SUDO=()
ROOT=1
if [[ $EUID -ne 0 ]]; then
  if command -v sudo >/dev/null && { sudo -n true 2>/dev/null || [[ -t 0 ]]; }; then
    SUDO=(sudo)
  else
    ROOT=0
  fi
fi
[[ "${DET_TEST_APT:-1}" != 0 ]] || ROOT=0

if [[ -n "$(det_apt_missing)" ]]; then
  if ((ROOT)); then
    det_apt_install "${SUDO[@]}" ||
      echo "test.sh: installing the system packages failed: the tests that need them skip" >&2
  fi
  if [[ -n "$(det_apt_missing)" ]]; then
    echo "test.sh: missing system packages (the tests that need them skip; README.md, \"The" \
      "tests\"); install them with:" >&2
    echo "  $(det_apt_line)" >&2
  fi
fi

if ! docker info >/dev/null 2>&1 && ((ROOT)) && command -v dockerd >/dev/null; then
  det_start_dockerd "${SUDO[@]}" || true
fi

if docker info >/dev/null 2>&1; then
  if det_image_stale || ! det_images_present; then
    echo "building the images the tests run (infra/build-images.sh $DET_TEST_IMAGE_TARGETS)"
    mkdir -p "$REPO/.cache"
    det_test_venv_and_images "$VENV" "$REPO/.cache/images.log" "${SUDO[@]}"
  else
    det_venv "$VENV" dev "torch==${TORCH_VERSION:-2.13.0}"
  fi
else
  det_venv "$VENV" dev "torch==${TORCH_VERSION:-2.13.0}"
  echo "no Docker engine: tests that need Docker will be skipped" >&2
fi

export DET_TEST_WAITING_LANES="${DET_TEST_WAITING_LANES:-1}"
workers=(-n "$((${DET_TEST_WORKERS:-4} + DET_TEST_WAITING_LANES))" --dist loadfile)
[[ "${DET_TEST_WORKERS:-4}" == 0 ]] && workers=(-p no:xdist)
# The machine's CPU over pytest's run (scripts/cpu_share.py): busy share, CPU pressure, load.
cpu_before="$(python3 scripts/cpu_share.py snap 2>/dev/null || true)"
set +e
"$VENV/bin/python" -m pytest "${workers[@]}" "$@"
rc=$?
set -e
cpu="$(python3 scripts/cpu_share.py since "$cpu_before" 2>/dev/null || true)"
[[ -z "$cpu" ]] || echo "test.sh: $cpu"
if [[ $rc -eq 5 ]]; then
  echo "test.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit $rc
