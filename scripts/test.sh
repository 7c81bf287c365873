#!/usr/bin/env bash
# Runs det's test suite: `bash scripts/test.sh [pytest arguments]`.
#
# Installs what is missing first: .venv with det-platform[dev] and torch (the harness tests train small
# models); with a Docker engine, the task images (infra/build-images.sh: needs root and
# debootstrap the first time; mmdebstrap, when installed, builds bookworm and trixie faster).
# Without a Docker engine the Docker and e2e tests are skipped.
# Then runs pytest (the same as `make test`) in DET_TEST_WORKERS parallel processes (default 3:
# most tests wait on masters, agents and containers rather than compute, so 3 beat the 2 cores,
# and 4 were slower than 3 there, by contention: docs/benchmarks.md, Round 6;
# a test file stays in one process, so module fixtures are shared as before; 0 runs it serially);
# "no tests collected" (exit 5) is a failure.
# Environment: DET_TEST_VENV (default .venv), TORCH_VERSION (default 2.13.0), DET_TEST_WORKERS.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/lib.sh
source "$REPO/scripts/lib.sh"
VENV="${DET_TEST_VENV:-$REPO/.venv}"

det_venv "$VENV" dev "torch==${TORCH_VERSION:-2.13.0}"

if docker info >/dev/null 2>&1; then
  if det_image_stale || ! det_images_present; then
    echo "building the task images (infra/build-images.sh)"
    PYTHON="$VENV/bin/python" bash infra/build-images.sh $DET_TEST_IMAGE_TARGETS
  fi
else
  echo "no Docker engine: tests that need Docker will be skipped" >&2
fi

workers=(-n "${DET_TEST_WORKERS:-3}" --dist loadfile)
[[ "${DET_TEST_WORKERS:-3}" == 0 ]] && workers=(-p no:xdist)
set +e
"$VENV/bin/python" -m pytest "${workers[@]}" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "test.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit $rc
