# Shared by scripts/demo.sh, scripts/test.sh and .ci/run (sourced, not run).
# Expects REPO (the repository root) to be set.

DET_TASK_IMAGE="det-task:py3.11-cpu-torch"
# What the test suite runs containers of, and the build-images.sh targets that make them.
# det-master is also tagged with its wheel's sha256: tests/e2e/test_serverless_sim.py runs the
# tag of the code under test and builds it (the cached dependency layer, then det) when missing.
DET_TEST_IMAGES=(det-task:py3.11-cpu-torch det-official:py3.11-torch det-base:bookworm
  det-base:trixie det-base:bullseye det-vm:trixie det-checkpoint-gc:py3.11 det-master:latest)
DET_TEST_IMAGE_TARGETS="torch trixie bullseye vm gc master"

# det_images_present: true when every image the tests use exists.
det_images_present() {
  local image
  for image in "${DET_TEST_IMAGES[@]}"; do
    docker image inspect "$image" >/dev/null 2>&1 || return 1
  done
}

# det_venv VENV EXTRAS [PIP ARGS...]: create VENV and `pip install -e ".[EXTRAS]"` into it, unless
# it already has det from this checkout's current pyproject.toml/setup.py with these extras.
det_venv() {
  local venv="$1" extras="$2"
  shift 2
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  local stamp
  stamp="$venv/.det-installed-$(cat "$REPO/pyproject.toml" "$REPO/setup.py" | sha256sum | cut -c1-12)-${extras//,/-}"
  if [[ -f "$stamp" && -x "$venv/bin/det" ]]; then
    echo "det-platform[$extras] already installed in $venv"
    return
  fi
  (cd "$REPO" && det_pip_install "$venv" -e ".[$extras]" "$@")
  touch "$stamp"
}

# uv, pinned: what det_pip_install installs with when it can be had.
DET_UV_VERSION="0.13.9"

# det_pip_install VENV ARGS...: `pip install ARGS` into VENV, done by uv when pip can install uv
# into VENV (.[dev] with torch: 27 s against pip's 86 s, the same packages at the same
# versions): uv downloads, unpacks and compiles in parallel. uv reads no pip configuration, so
# scripts/uv_args.py passes it the machine's (indexes, wheel folders, constraints) and asks for
# the best version across all indexes, as pip takes it. Without uv (no index has it), pip.
# Both compile bytecode: where PYTHONDONTWRITEBYTECODE is set, as in this machine's shells,
# Python never writes what it compiles, and without .pyc files every process compiles every
# module it imports, each time (`import torch`: 4.4 CPU-s against 2.2).
det_pip_install() {
  local venv="$1" config uv_args=()
  shift
  if "$venv/bin/python" -m pip install --quiet "uv==$DET_UV_VERSION" 2>/dev/null &&
    config="$("$venv/bin/python" "$REPO/scripts/uv_args.py")"; then
    [[ -z "$config" ]] || mapfile -t uv_args <<<"$config"
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "${uv_args[@]}" "$@"
  else
    echo "uv $DET_UV_VERSION could not be installed: installing with pip" >&2
    "$venv/bin/python" -m pip install --quiet "$@"
  fi
}

# det_image_stale: true when the task image is missing or older than the last commit that
# changed the harness it carries.
det_image_stale() {
  local created harness
  created="$(docker image inspect -f '{{.Created}}' "$DET_TASK_IMAGE" 2>/dev/null)" || return 0
  harness="$(git -C "$REPO" log -1 --format=%cI -- harness setup.py pyproject.toml 2>/dev/null || true)"
  [[ -n "$harness" ]] || return 1
  [[ "$(date -d "$harness" +%s)" -gt "$(date -d "$created" +%s)" ]]
}

# det_start_dockerd [SUDO...]: start the Docker engine unless it answers; wait up to 60 s.
det_start_dockerd() {
  if "$@" docker info >/dev/null 2>&1; then
    return
  fi
  if [[ -d /run/systemd/system ]]; then
    "$@" systemctl start docker
  else
    echo "starting dockerd in the background (log: /var/log/dockerd.log)"
    "$@" sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'
  fi
  local _
  for _ in $(seq 60); do
    [[ -S /var/run/docker.sock ]] && "$@" docker info >/dev/null 2>&1 && return
    sleep 1
  done
  echo "dockerd did not start (see /var/log/dockerd.log)" >&2
  return 1
}
