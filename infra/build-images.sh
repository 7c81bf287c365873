#!/usr/bin/env bash
# Builds the det task images on a machine with a Docker engine and no Docker Hub.
#
#   det-base:bookworm            Debian bookworm minbase + python3 (debootstrap | docker import);
#                                cached: skipped when the image exists (FORCE_BASE=1 rebuilds).
#   det-base:trixie              Debian trixie minbase + python3 (3.13), python3-venv, ca-certificates;
#                                nothing of det, no pip packages: tasks get det from the agent's
#                                harness bundle, and tests use it as a second interpreter. Cached.
#   det-base:bullseye            Debian bullseye minbase + python3 (3.9, the oldest Python on Debian's
#                                mirror): the harness's oldest tested interpreter. Cached.
#   det-vm:trixie                Debian trixie minbase + python3, python3-venv, ca-certificates, curl:
#                                what a fresh cloud VM has before its boot script runs (the deploy
#                                boot simulation runs the rendered startup scripts in it); cached.
#   det-task:py3.11-cpu          det-base + a venv with the det harness (wheel of this repo).
#   det-task:py3.11-cpu-torch    det-base + torch (CPU) + determined==0.38.1 + tensorboard + JupyterLab
#                                + asyncssh (shell tasks) + the det harness (torch first: a det change rebuilds only the last layer).
#   det-task:py3.11-cpu-torch-slim  det-base + torch (CPU) + the det harness, nothing else: what the
#                                demo's search runs while the full task image builds after it.
#   det-official:py3.11-torch    the same without det: only the official determined package (built with
#                                the torch target, from the cached first stage).
#   det-checkpoint-gc:py3.11     det-base + a venv with boto3 and google-cloud-storage: the checkpoint-GC
#                                tasks' image (master.yaml task_container_defaults.checkpoint_gc_image);
#                                no det (the agent's harness bundle brings it). Built by
#                                det.deploy.common.gc_image, the recipe `det deploy … --mirror-images` uses.
#   det-master:latest            det-base + det-platform[master,aws,gcp] from the wheel `det deploy` ships, as the
#                                serverless master (infra/master-image); also tagged det-master:SHA12
#                                (the wheel's sha256) and labelled ai.det.wheel-sha256. The dependency
#                                layer is cached while the constraints are unchanged. Always linux/amd64
#                                (what Cloud Run and the Fargate task run). MASTER_BASE=official builds
#                                it FROM Docker Hub's python:3.11-slim with `--platform linux/amd64`
#                                (no root, no debootstrap: a laptop, macOS or arm64 included, with
#                                Docker Desktop's emulation); MASTER_BASE=debootstrap (the default
#                                here) FROM det-base:bookworm, for an x86_64 machine without Docker
#                                Hub. `det deploy ... up` runs this target with MASTER_BASE=official
#                                unless DET_MASTER_BASE says otherwise (docs/deploy.md).
#
# Python packages are downloaded on the host (pip honours the host's index, find-links and CA
# bundle) into a wheelhouse that is part of the build context, so builds inside Docker never
# touch the network. Idempotent: re-running re-uses the base image and Docker's layer cache.
#
# Usage: infra/build-images.sh [TARGET...]   TARGET: base|trixie|bullseye|vm|cpu|slim|torch|gc|master|all
#        (default: all)
# Environment: PYTHON (host python used for pip, default python3), DEBIAN_MIRROR,
#              TORCH_VERSION (2.13.0), DETERMINED_VERSION (0.38.1), FORCE_BASE=1 (rebuilds the
#              debootstrap images too), MASTER_BASE (debootstrap|official: the master image's
#              base; OFFICIAL_PYTHON_IMAGE, default python:3.11-slim, names the official one),
#              DET_IMAGE_WHEEL_CACHE (a folder where the downloaded
#              wheels are also kept, under the key of their stamp, and copied from by a later
#              build in another checkout: .ci/run sets it).
set -euo pipefail

TARGETS=("${@:-all}")
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/infra/task-image"
PYTHON="${PYTHON:-python3}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
DETERMINED_VERSION="${DETERMINED_VERSION:-0.38.1}"
BASE_IMAGE="det-base:bookworm"
TRIXIE_IMAGE="det-base:trixie"
BULLSEYE_IMAGE="det-base:bullseye"
VM_IMAGE="det-vm:trixie"
CPU_IMAGE="det-task:py3.11-cpu"
TORCH_IMAGE="det-task:py3.11-cpu-torch"
SLIM_IMAGE="det-task:py3.11-cpu-torch-slim"
OFFICIAL_IMAGE="det-official:py3.11-torch"
MASTER_IMAGE="det-master"
MASTER_HERE="$REPO/infra/master-image"
MASTER_BASE="${MASTER_BASE:-debootstrap}"
OFFICIAL_PYTHON_IMAGE="${OFFICIAL_PYTHON_IMAGE:-python:3.11-slim}"
# The platform serverless masters run on (Cloud Run and Fargate tasks here: x86_64).
MASTER_PLATFORM="linux/amd64"
# The task images run CPython 3.11 on manylinux x86_64 (bookworm's python3).
PIP_TARGET_ARGS=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux1_x86_64 --platform any)

log() { echo "[build-images] $*" >&2; }
die() { echo "[build-images] ERROR: $*" >&2; exit 1; }
timed() {
  local what="$1"; shift
  local start=$SECONDS
  log "start: $what"
  "$@" || die "$what failed (exit $?)"
  log "done:  $what ($((SECONDS - start)) s)"
}

# restore_kept DIR STAMP: true when DIR is complete (STAMP inside it), copied if need be from
# DET_IMAGE_WHEEL_CACHE, where keep_copy left it under STAMP's name.
restore_kept() {
  local dir="$1" stamp="$2" kept
  [[ -f "$dir/$stamp" ]] && return 0
  [[ -n "${DET_IMAGE_WHEEL_CACHE:-}" ]] || return 1
  kept="$DET_IMAGE_WHEEL_CACHE/${stamp#.complete-}"
  [[ -f "$kept/$stamp" ]] || return 1
  rm -rf "$dir" && mkdir -p "$(dirname "$dir")" && cp -r "$kept" "$dir"
  log "wheels copied from $kept"
}

# keep_copy DIR STAMP: a copy of the complete DIR in DET_IMAGE_WHEEL_CACHE (when set).
keep_copy() {
  local dir="$1" stamp="$2" kept
  [[ -n "${DET_IMAGE_WHEEL_CACHE:-}" ]] || return 0
  kept="$DET_IMAGE_WHEEL_CACHE/${stamp#.complete-}"
  mkdir -p "$DET_IMAGE_WHEEL_CACHE"
  rm -rf "$kept.tmp.$$" && cp -r "$dir" "$kept.tmp.$$"
  rm -rf "$kept" && mv "$kept.tmp.$$" "$kept"
}

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "cannot reach the Docker engine (is dockerd running, may you use its socket?)"

IMPORT_CHANGES=(--change 'ENV LANG=C.UTF-8'
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  --change 'CMD ["/bin/bash"]')

# debootstrap_image SUITE IMAGE PACKAGES: a minbase root file system imported as IMAGE (cached).
# With mmdebstrap (when installed) rather than debootstrap: the same minbase, with apt's parallel
# downloads and one dpkg run, several times faster (docs/benchmarks.md, "The demo on a fresh
# machine").
debootstrap_image() {
  local suite="$1" image="$2" packages="$3"
  if [[ -z "${FORCE_BASE:-}" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    log "$image exists: skipping debootstrap (FORCE_BASE=1 to rebuild)"
    return
  fi
  [[ $EUID -eq 0 ]] || die "debootstrap needs root"
  # bullseye stays with debootstrap: it has no usr-is-merged, so mmdebstrap would leave /usr
  # unmerged where debootstrap merges it.
  if command -v mmdebstrap >/dev/null && [[ "$suite" != bullseye ]]; then
    # The merged-usr hook (for the suites that have usr-is-merged: bookworm and later) makes the
    # /usr links itself, so usr-is-merged stands in for usrmerge (which would pull in perl), as
    # with debootstrap. mmdebstrap leaves out apt's caches and lists.
    timed "mmdebstrap $suite -> $image" bash -o pipefail -c 'mmdebstrap --quiet --mode=root \
        --variant=minbase --include="$1" --hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr \
        "$2" - "$3" | docker import "${@:5}" - "$4" >/dev/null' _ \
      "$packages" "$suite" "$DEBIAN_MIRROR" "$image" "${IMPORT_CHANGES[@]}"
    return
  fi
  command -v debootstrap >/dev/null \
    || die "debootstrap not installed (apt-get install debootstrap; mmdebstrap too, faster)"
  local rootfs
  rootfs="$(mktemp -d -t "det-$suite-rootfs.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$rootfs'" RETURN
  timed "debootstrap $suite into $rootfs" debootstrap --variant=minbase \
    --include="$packages" "$suite" "$rootfs" "$DEBIAN_MIRROR"
  # Keep the image small: package caches and lists are not needed at run time.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  timed "docker import -> $image" bash -o pipefail -c \
    'tar -C "$1" -c . | docker import "${@:3}" - "$2" >/dev/null' _ \
    "$rootfs" "$image" "${IMPORT_CHANGES[@]}"
}

build_base() { debootstrap_image bookworm "$BASE_IMAGE" python3,python3-venv,ca-certificates; }
# Nothing but Debian's python3 (and what makes a venv possible): no det, no pip packages.
build_trixie() { debootstrap_image trixie "$TRIXIE_IMAGE" python3,python3-venv,ca-certificates; }
build_vm() { debootstrap_image trixie "$VM_IMAGE" python3,python3-venv,ca-certificates,curl,gzip; }
build_bullseye() { debootstrap_image bullseye "$BULLSEYE_IMAGE" python3,ca-certificates; }

# Wheelhouse inside the build context (ignored by git, see infra/task-image/.gitignore).
WHEELS="$HERE/wheels"

prepare_harness_wheels() {
  rm -rf "$WHEELS/harness" && mkdir -p "$WHEELS/harness"
  # Built from a copy of the checkout's files (those git tracks or would track): pip builds a
  # local folder in place (build/, det_platform.egg-info), and the demo and .ci/run install det
  # into their venv from the checkout while this runs beside them; a stale build/ is not
  # shipped either. Outside a git checkout, the folder itself.
  local src="$REPO"
  if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
    src="$(mktemp -d)"
    git -C "$REPO" ls-files -z -co --exclude-standard |
      tar -C "$REPO" --null -T - --ignore-failed-read --warning=none -c | tar -C "$src" -x
  fi
  # A fixed SOURCE_DATE_EPOCH makes the wheel byte-identical when the code is, so Docker's
  # layer cache (content checksums) is hit on re-runs.
  timed "pip wheel det-platform (this repo)" env SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-315532800}" \
    "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS/harness" "$src"
  [[ "$src" == "$REPO" ]] || rm -rf "$src"
  # Dependencies of the harness only (the base install is light by design).
  timed "pip download harness dependencies" "$PYTHON" -m pip download --quiet \
    --dest "$WHEELS/harness" "${PIP_TARGET_ARGS[@]}" "$WHEELS"/harness/det_platform-*.whl
}

prepare_torch_wheels() {
  local stamp=".complete-torch-$TORCH_VERSION-determined-$DETERMINED_VERSION-tensorboard"
  if restore_kept "$WHEELS/torch" "$stamp"; then
    log "wheels for torch $TORCH_VERSION and determined $DETERMINED_VERSION already downloaded"
    return
  fi
  rm -rf "$WHEELS/torch" && mkdir -p "$WHEELS/torch"
  # torch CPU comes from pip's configured find-links (a local CPU wheel) or the index.
  # tensorboard: Determined's trial classes (PyTorchTrial) always write TensorBoard events.
  timed "pip download torch==$TORCH_VERSION (cpu), determined==$DETERMINED_VERSION, tensorboard" \
    "$PYTHON" -m pip download --quiet --dest "$WHEELS/torch" "${PIP_TARGET_ARGS[@]}" \
    "torch==$TORCH_VERSION" "determined==$DETERMINED_VERSION" tensorboard
  ls "$WHEELS"/torch/torch-"$TORCH_VERSION"*.whl >/dev/null 2>&1 || die "no torch $TORCH_VERSION wheel downloaded"
  touch "$WHEELS/torch/$stamp"
  keep_copy "$WHEELS/torch" "$stamp"
}

# torch and its dependencies only (the slim image).
prepare_slim_wheels() {
  local stamp=".complete-slim-torch-$TORCH_VERSION"
  if restore_kept "$WHEELS/slim" "$stamp"; then
    log "wheels for torch $TORCH_VERSION already downloaded"
    return
  fi
  rm -rf "$WHEELS/slim" && mkdir -p "$WHEELS/slim"
  timed "pip download torch==$TORCH_VERSION (cpu)" "$PYTHON" -m pip download --quiet \
    --dest "$WHEELS/slim" "${PIP_TARGET_ARGS[@]}" "torch==$TORCH_VERSION"
  touch "$WHEELS/slim/$stamp"
  keep_copy "$WHEELS/slim" "$stamp"
}

build_slim() {
  [[ -d "$WHEELS/harness" ]] || prepare_harness_wheels
  timed "docker build $SLIM_IMAGE" docker build --quiet -t "$SLIM_IMAGE" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TORCH_VERSION=$TORCH_VERSION" \
    -f "$HERE/Dockerfile.slim" "$HERE"
}

prepare_notebook_wheels() {
  local stamp=".complete-jupyterlab-asyncssh"
  if restore_kept "$WHEELS/notebook" "$stamp"; then
    log "wheels for jupyterlab and asyncssh already downloaded"
    return
  fi
  rm -rf "$WHEELS/notebook" && mkdir -p "$WHEELS/notebook"
  # asyncssh: the SSH server of shell tasks (det shell start).
  timed "pip download jupyterlab asyncssh" "$PYTHON" -m pip download --quiet \
    --dest "$WHEELS/notebook" "${PIP_TARGET_ARGS[@]}" jupyterlab asyncssh
  touch "$WHEELS/notebook/$stamp"
  keep_copy "$WHEELS/notebook" "$stamp"
}

build_cpu() {
  prepare_harness_wheels
  timed "docker build $CPU_IMAGE" docker build --quiet -t "$CPU_IMAGE" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" -f "$HERE/Dockerfile" "$HERE"
}

build_torch() {
  prepare_torch_wheels
  prepare_notebook_wheels
  [[ -d "$WHEELS/harness" ]] || prepare_harness_wheels
  timed "docker build $TORCH_IMAGE" docker build --quiet -t "$TORCH_IMAGE" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TORCH_VERSION=$TORCH_VERSION" \
    --build-arg "DETERMINED_VERSION=$DETERMINED_VERSION" \
    -f "$HERE/Dockerfile.torch" "$HERE"
  # The same build's first stage (cached layers): torch + the official package, no det.
  timed "docker build $OFFICIAL_IMAGE" docker build --quiet -t "$OFFICIAL_IMAGE" --target official \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TORCH_VERSION=$TORCH_VERSION" \
    --build-arg "DETERMINED_VERSION=$DETERMINED_VERSION" \
    -f "$HERE/Dockerfile.torch" "$HERE"
}

# The master image: det's wheel as `det deploy` builds it (release.build: a fixed
# SOURCE_DATE_EPOCH, so the same code gives the same bytes) and its dependencies pinned by the
# same constraints (release.constraints_text), downloaded for the image's Python.
prepare_master_wheels() {
  local mw="$MASTER_HERE/wheels"
  rm -rf "$mw/det" && mkdir -p "$mw/det" "$mw/deps"
  timed "det wheel and constraints (det.deploy.common.release)" "$PYTHON" - "$mw/det" <<'PY'
import sys
from pathlib import Path

from det.deploy.common import release

out = Path(sys.argv[1])
built = release.build(out)
(out / "constraints.txt").write_text(built.constraints)
(out / "sha256").write_text(built.sha256 + "\n")
PY
  local key
  key="$(cat "$mw/det/constraints.txt" "$REPO/pyproject.toml" | sha256sum | cut -c1-16)"
  if restore_kept "$mw/deps" ".complete-master-deps-$key"; then
    log "master dependencies for constraints $key already downloaded"
  else
    rm -rf "$mw/deps" && mkdir -p "$mw/deps"
    # `pip download` of the wheel with its extras; the det wheel itself is left out of deps/.
    timed "pip download det-platform[master,aws,gcp] dependencies" "$PYTHON" -m pip download --quiet \
      --dest "$mw/deps" "${PIP_TARGET_ARGS[@]}" --constraint "$mw/det/constraints.txt" \
      "$(ls "$mw"/det/det_platform-*.whl)[master,aws,gcp]"
    rm -f "$mw"/deps/det_platform-*.whl
    touch "$mw/deps/.complete-master-deps-$key"
    keep_copy "$mw/deps" ".complete-master-deps-$key"
  fi
}

# The checkpoint-GC image: the same recipe as `det deploy … up --mirror-images` builds on a
# deployer's machine, from det-base:bookworm instead of Docker Hub's python image.
build_gc() {
  timed "docker build det-checkpoint-gc:py3.11 (det.deploy.common.gc_image)" \
    "$PYTHON" -m det.deploy.common.gc_image --base "$BASE_IMAGE"
}

# master_base: the master build's BASE_IMAGE for MASTER_BASE, into MASTER_FROM (debootstrap:
# built here first, and only on x86_64, as debootstrap makes the host's architecture).
master_base() {
  case "$MASTER_BASE" in
    official) MASTER_FROM="$OFFICIAL_PYTHON_IMAGE" ;;
    debootstrap)
      [[ "$(uname -m)" == x86_64 ]] \
        || die "MASTER_BASE=debootstrap builds this machine's architecture ($(uname -m)), not $MASTER_PLATFORM: use MASTER_BASE=official"
      build_base
      MASTER_FROM="$BASE_IMAGE" ;;
    *) die "MASTER_BASE must be debootstrap or official, not '$MASTER_BASE'" ;;
  esac
}

build_master() {
  master_base
  prepare_master_wheels
  local sha old
  sha="$(cat "$MASTER_HERE/wheels/det/sha256")"
  old="$(docker image inspect -f '{{.Id}}' "$MASTER_IMAGE:latest" 2>/dev/null || true)"
  timed "docker build $MASTER_IMAGE ($MASTER_PLATFORM, FROM $MASTER_FROM)" docker build --quiet \
    --platform "$MASTER_PLATFORM" -t "$MASTER_IMAGE:latest" \
    -t "$MASTER_IMAGE:${sha:0:12}" --label "ai.det.wheel-sha256=$sha" \
    --build-arg "BASE_IMAGE=$MASTER_FROM" -f "$MASTER_HERE/Dockerfile" "$MASTER_HERE"
  # The image :latest named before, when no tag names it any more (a test that built its
  # det-master:SHA12 drops that tag at its end): nothing can run it by name, so it goes (a
  # container still using it keeps it: the removal fails and is ignored).
  if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$MASTER_IMAGE:latest")" &&
    "$(docker image inspect -f '{{len .RepoTags}}' "$old" 2>/dev/null)" == 0 ]]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
}

# base_beside STEP...: builds the base image in the background while the STEPs (pip's wheel
# downloads, which need no image) run, then waits for it.
base_beside() {
  build_base &
  local pid=$! step
  # shellcheck disable=SC2064
  trap "kill $pid 2>/dev/null || true" EXIT
  for step in "$@"; do "$step"; done
  wait "$pid" || die "building $BASE_IMAGE failed"
  trap - EXIT
}

for target in "${TARGETS[@]}"; do
  case "$target" in
    base) build_base ;;
    trixie) build_trixie ;;
    vm) build_vm ;;
    bullseye) build_bullseye ;;
    cpu) build_base; build_cpu ;;
    slim) base_beside prepare_harness_wheels prepare_slim_wheels; build_slim ;;
    torch) base_beside prepare_harness_wheels prepare_torch_wheels prepare_notebook_wheels; build_torch ;;
    gc) build_base; build_gc ;;
    master) build_master ;;
    all) build_base; build_trixie; build_bullseye; build_cpu; build_torch; build_gc; build_master ;;
    *) die "unknown target '$target' (base|trixie|bullseye|vm|cpu|slim|torch|gc|master|all)" ;;
  esac
done
log "images:"
docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E 'det-(base|task|vm|official|checkpoint-gc|master)' >&2 || true
