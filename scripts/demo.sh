#!/usr/bin/env bash
# The det demo, from a fresh Debian/Ubuntu machine to a finished hyperparameter search:
#
#   1. installs docker.io, mmdebstrap, debootstrap, python3-venv and git when missing (root or
#      sudo), starts dockerd
#   2. creates .venv and installs det (master, agent, cli extras) into it, while
#   3. when the task image is missing or older than the harness, the image the search needs
#      builds in the background: det-task:py3.11-cpu-torch-slim (torch + det, no JupyterLab,
#      TensorBoard or the official determined package: infra/build-images.sh slim)
#   4. det deploy local up --agents 2, logs in as admin
#   5. runs examples/core_api/adaptive_asha.yaml to completion (on the slim image when it was
#      built: --config environment.image=...) and prints the best trial
#   6. after the search, the full task image (the master's default, what notebooks, shells and
#      TensorBoards need) builds in the background, its log named (not with DET_DEMO_DOWN=1)
#
# Re-runnable: every step checks first; a running cluster is reused; each run is a new experiment.
# Environment (all optional):
#   DET_LOCAL_STATE_DIR   the cluster's state directory (default ~/.local/share/det/local)
#   DET_DEMO_PORT         master port (default 8080)     DET_DEMO_AGENTS   agents (default 2)
#   DET_DEMO_CONFIG       experiment config (default examples/core_api/adaptive_asha.yaml)
#   DET_DEMO_VENV         the virtualenv (default .venv in the repository)
#   DET_DEMO_DOWN=1       stop the cluster at the end (data kept)
#   DET_DEMO_FULL_IMAGE=0 do not build the full task image after the search (step 6)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PORT="${DET_DEMO_PORT:-8080}"
AGENTS="${DET_DEMO_AGENTS:-2}"
CONFIG="${DET_DEMO_CONFIG:-examples/core_api/adaptive_asha.yaml}"
CONTEXT="$(dirname "$CONFIG")"
VENV="${DET_DEMO_VENV:-$REPO/.venv}"
START=$SECONDS
# shellcheck source=scripts/lib.sh
source "$REPO/scripts/lib.sh"

STEPS=()
step() {
  printf '\n==> [%4ss] %s\n' "$((SECONDS - START))" "$*"
  STEPS+=("$((SECONDS - START)) $*")
}
# timings: each step's seconds (from its start to the next step's), printed at the end.
timings() {
  local i now=$((SECONDS - START)) t name next
  echo "timings (s):"
  for i in "${!STEPS[@]}"; do
    t="${STEPS[$i]%% *}" name="${STEPS[$i]#* }"
    next="${STEPS[$((i + 1))]:-$now}"
    printf '  %5d  %s\n' "$((${next%% *} - t))" "$name"
  done
  printf '  %5d  total\n' "$now"
}
die() { echo "demo: error: $*" >&2; exit 1; }

SUDO=()
if [[ $EUID -ne 0 ]]; then
  command -v sudo >/dev/null || die "run as root, or install sudo"
  SUDO=(sudo)
fi

step "system packages"
pkgs=()
command -v dockerd >/dev/null || pkgs+=(docker.io)
# mmdebstrap builds the images' Debian root file systems (debootstrap does too, several times
# slower); debootstrap for the bullseye image of the test suite (bash scripts/test.sh).
command -v mmdebstrap >/dev/null || pkgs+=(mmdebstrap)
command -v debootstrap >/dev/null || pkgs+=(debootstrap)
python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs+=(python3-venv)
command -v git >/dev/null || pkgs+=(git)
if ((${#pkgs[@]})); then
  echo "installing ${pkgs[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    ca-certificates "${pkgs[@]}"
else
  echo "docker.io, mmdebstrap, debootstrap, python3-venv, git: present"
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "det needs Python >= 3.11 (Debian 12 or Ubuntu 24.04 and later)"

step "Docker engine"
det_start_dockerd "${SUDO[@]}" || die "the Docker engine did not start"
docker info >/dev/null 2>&1 \
  || die "Docker runs but $USER may not use it: sudo usermod -aG docker $USER, log in again, re-run"
echo "Docker engine: running"

step "Python environment ($VENV) and task images, side by side"
# The image build needs only a bare venv's pip (it builds det's wheel with build isolation), so
# it runs in the background while pip installs det: the two are the longest steps of a first run.
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
BUILD_PID=""
BUILD_LOG="$(mktemp -t det-demo-images.XXXXXX)"
# The search needs torch and det only: the full task image (JupyterLab, TensorBoard, the
# official package: about twice the build) waits until the search is done.
SEARCH_IMAGE=""
if det_image_stale; then
  SEARCH_IMAGE="$DET_SLIM_IMAGE"
  echo "building $SEARCH_IMAGE, what the search runs, in the background (Debian root file" \
    "system + wheels; log: $BUILD_LOG); $DET_TASK_IMAGE after the search"
  ((${#SUDO[@]} == 0)) || sudo -v  # ask for the password now, not from the background
  "${SUDO[@]}" env PYTHON="$VENV/bin/python" bash infra/build-images.sh slim >"$BUILD_LOG" 2>&1 &
  BUILD_PID=$!
else
  echo "$DET_TASK_IMAGE: up to date"
fi
# Not the `deploy` extra: `det deploy local` needs none of it, and its Pulumi providers are 600 MB
# of the venv (most of a first run's install); `det deploy aws|gcp` without it says what to install.
det_venv "$VENV" master,agent,cli
export PATH="$VENV/bin:$PATH"
VERSION="$(det --version)" || die "the det command does not start (see above)"
echo "installed: $VERSION"

step "local cluster: det deploy local up --agents $AGENTS --master-port $PORT"
# --no-images while the build above runs: `up` would otherwise start a second build of the image.
det deploy local up --agents "$AGENTS" --master-port "$PORT" ${BUILD_PID:+--no-images}
STATUS="$(det deploy local status --json)"
read -r URL STATE_DIR < <(python3 -c \
  'import json,sys; s=json.load(sys.stdin); print(s["master"]["url"], s["state_dir"])' <<<"$STATUS")
export DET_MASTER="$URL"

step "log in as admin at $DET_MASTER"
det user login admin <"$STATE_DIR/admin_password"

# The cluster started and logged in while the image built: only the experiment needs it.
if [[ -n "$BUILD_PID" ]]; then
  step "waiting for $SEARCH_IMAGE"
  if ! wait "$BUILD_PID"; then
    tail -n 30 "$BUILD_LOG" >&2
    die "building $SEARCH_IMAGE failed (full log: $BUILD_LOG)"
  fi
  grep -E 'done: ' "$BUILD_LOG" || true
fi
rm -f "$BUILD_LOG"

IMAGE_ARGS=()
[[ -z "$SEARCH_IMAGE" ]] || IMAGE_ARGS=(--config "environment.image=$SEARCH_IMAGE")
step "experiment: det experiment create $CONFIG $CONTEXT ${IMAGE_ARGS[*]}"
OUT="$(det experiment create "$CONFIG" "$CONTEXT" "${IMAGE_ARGS[@]}")"
echo "$OUT"
EXP="$(grep -oE 'experiment [0-9]+' <<<"$OUT" | grep -oE '[0-9]+' | head -1)"
[[ -n "$EXP" ]] || die "could not read the experiment id from: $OUT"

step "waiting for experiment $EXP (det experiment wait $EXP)"
if ! det experiment wait "$EXP"; then
  det experiment describe "$EXP" || true
  die "experiment $EXP did not complete; see 'det trial logs <trial id>'"
fi

step "result"
det experiment describe "$EXP"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
det experiment describe "$EXP" --json >"$TMP/experiment.json"
det checkpoint list "$EXP" --json >"$TMP/checkpoints.json"
echo
python3 scripts/best_trial.py "$TMP/experiment.json" "$TMP/checkpoints.json"
echo
timings
echo "done in $((SECONDS - START)) s. The cluster keeps running: DET_MASTER=$URL det experiment list"
if [[ -n "$SEARCH_IMAGE" && -z "${DET_DEMO_DOWN:-}" && "${DET_DEMO_FULL_IMAGE:-1}" != 0 ]]; then
  FULL_LOG="$(mktemp -t det-demo-task-image.XXXXXX)"
  # Left running after the demo ends (nohup): notebooks, shells and TensorBoards need it.
  "${SUDO[@]}" env PYTHON="$VENV/bin/python" nohup bash infra/build-images.sh torch \
    >"$FULL_LOG" 2>&1 </dev/null &
  echo "building $DET_TASK_IMAGE (JupyterLab, TensorBoard) in the background for notebooks," \
    "shells and TensorBoards: a few minutes (log: $FULL_LOG)"
fi
echo "WebUI: $URL/det/ (user admin, password in $STATE_DIR/admin_password)"
echo "stop it with: det deploy local down"
if [[ -n "${DET_DEMO_DOWN:-}" ]]; then
  det deploy local down
fi
