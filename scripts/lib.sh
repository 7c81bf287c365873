# Shared by scripts/demo.sh, scripts/test.sh and .ci/run (sourced, not run).
# Expects REPO (the repository root) to be set.

# The system packages the test suite uses (Debian/Ubuntu names), each with what shows it is
# there without dpkg: a command (on PATH or in /usr/sbin, /sbin) or a file. The probe lets a
# Docker engine from docker-ce stand for docker.io (installing both would conflict).
# scripts/test.sh and .ci/run install the missing ones with det_apt_install; which tests skip
# without which of them: README.md, "The tests".
DET_APT_PACKAGES=(
  docker.io:dockerd mmdebstrap:mmdebstrap debootstrap:debootstrap python3-venv:
  ca-certificates:/etc/ssl/certs/ca-certificates.crt git:git make:make curl:curl openssl:openssl
  chromium:chromium docker-registry:docker-registry apache2-utils:htpasswd
  openssh-client:ssh nginx:nginx nodejs:node libatomic1:
)
# libatomic1: Playwright's own Node.js (its driver, which the WebUI tests start) links it; a
# minimal Debian lacks it and chromium does not pull it in.

# det_apt_missing: prints the packages of DET_APT_PACKAGES that are not installed, one a line
# (one dpkg-query for all of them, then the probes of those it does not list as installed).
det_apt_missing() {
  local entry pkg probe installed
  # dpkg-query exits 1 when any package is unknown to dpkg (on a fresh machine, most): under the
  # callers' `set -eo pipefail` a process substitution (`< <(det_apt_missing)`) inherits errexit
  # and would end here, printing nothing, as if every package were installed.
  installed=" $({ dpkg-query -W -f='${Package}:${Status}\n' "${DET_APT_PACKAGES[@]%%:*}" 2>/dev/null ||
    true; } | awk -F: '/ok installed$/ {printf "%s ", $1}')"
  for entry in "${DET_APT_PACKAGES[@]}"; do
    pkg="${entry%%:*}" probe="${entry#*:}"
    [[ "$installed" == *" $pkg "* ]] && continue
    case "$probe" in
      "") ;;
      /*) [[ -e "$probe" ]] && continue ;;
      *) { command -v "$probe" || [[ -x "/usr/sbin/$probe" || -x "/sbin/$probe" ]]; } >/dev/null &&
        continue ;;
    esac
    echo "$pkg"
  done
}

# det_apt_install [SUDO...]: installs the missing system packages with apt-get (nothing, not even
# `apt-get update`, when none is missing). Fails when apt-get does or is not there.
det_apt_install() {
  local missing
  mapfile -t missing < <(det_apt_missing)
  if ((${#missing[@]} == 0)); then
    echo "system packages: all ${#DET_APT_PACKAGES[@]} installed"
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "no apt-get (not Debian or Ubuntu): install ${missing[*]} yourself" >&2
    return 1
  fi
  echo "installing ${missing[*]}"
  "$@" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    "$@" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}"
}

# det_apt_line: the one command that installs the missing system packages (empty when none is).
det_apt_line() {
  local missing
  mapfile -t missing < <(det_apt_missing)
  ((${#missing[@]} == 0)) ||
    echo "sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
}

DET_TASK_IMAGE="det-task:py3.11-cpu-torch"
# What the demo's search runs while DET_TASK_IMAGE builds (infra/build-images.sh slim).
DET_SLIM_IMAGE="det-task:py3.11-cpu-torch-slim"
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
  det_venv_create "$venv"
  local stamp
  stamp="$venv/.det-installed-$(cat "$REPO/pyproject.toml" "$REPO/setup.py" | sha256sum | cut -c1-12)-${extras//,/-}"
  if [[ -f "$stamp" && -x "$venv/bin/det" ]]; then
    echo "det-platform[$extras] already installed in $venv"
    return
  fi
  (cd "$REPO" && det_pip_install "$venv" -e ".[$extras]" "$@")
  touch "$stamp"
}

# det_venv_create VENV: `python3 -m venv VENV` unless it exists. With DET_VENV_CACHE set, the
# venv is marked relocatable (`relocatable = true` in pyvenv.cfg, which uv reads): the scripts
# uv installs find their Python relative to themselves, so a copy of the venv elsewhere works.
det_venv_create() {
  local venv="$1"
  [[ -x "$venv/bin/python" ]] && return
  python3 -m venv "$venv"
  [[ -z "${DET_VENV_CACHE:-}" ]] || echo "relocatable = true" >>"$venv/pyvenv.cfg"
}

# The venv kept between runs (DET_VENV_CACHE, which .ci/run sets; unset, neither function does
# anything): the dev install's dependencies (torch among them: 42 s of uv's downloads, unpacking
# and bytecode compiling, 57 CPU-s of it the compiling) are the same from one run to the next
# while the pyproject.toml, setup.py, the pip arguments, the Python and the machine's pip
# configuration are. det_venv_keep saves a venv that det_venv filled, det itself uninstalled,
# under the hash of those (DIR/HASH); det_venv_seed starts a new VENV as a copy of it made of
# hard links (a second), to which det_venv then adds det (its editable install, 3 s). Safe as a
# pip cache is: what differs gives another hash; nothing writes into an installed file in place
# (Python writes bytecode to a new file and renames it; pip and uv remove a file and write a
# new one), so a venv's own changes never reach the copy kept; a template is complete when its
# directory exists (filled beside, then renamed into place). The two newest are kept.
det_venv_key() {
  {
    echo "det venv template 1"
    cat "$REPO/pyproject.toml" "$REPO/setup.py"
    printf '%s\n' "$@" "$DET_UV_VERSION"
    python3 -c 'import sys; print(sys.version, sys.executable)'
    python3 "$REPO/scripts/uv_args.py" 2>/dev/null || true
  } | sha256sum | cut -c1-16
}

# det_venv_seed VENV EXTRAS [PIP ARGS...]: VENV as a hard-linked copy of the kept venv for these
# arguments, when VENV does not exist and one is kept.
det_venv_seed() {
  local venv tmpl origin file
  venv="$(realpath -m "$1")"
  [[ -n "${DET_VENV_CACHE:-}" && ! -e "$venv" ]] || return 0
  tmpl="$DET_VENV_CACHE/$(det_venv_key "${@:2}")"
  [[ -f "$tmpl/.det-template-of" ]] || return 0
  origin="$(cat "$tmpl/.det-template-of")"
  if ! cp -al "$tmpl" "$venv"; then
    rm -rf "$venv"
    return 0
  fi
  rm -f "$venv/.det-template-of"
  # What names the saved venv's own path (pip's scripts, the activate scripts, pyvenv.cfg):
  # rewritten, each into a new file (sed -i), so the kept copy keeps its own.
  while IFS= read -r file; do
    sed -i "s#$origin#$venv#g" "$file"
  done < <(grep -rlIF -- "$origin" "$venv/bin" "$venv/pyvenv.cfg")
  touch "$tmpl"
  echo "venv: a copy of $tmpl (hard links)"
}

# det_venv_keep VENV EXTRAS [PIP ARGS...]: save VENV (just filled by det_venv) for these arguments,
# unless a venv is kept for them already.
det_venv_keep() {
  local venv tmpl tmp old
  venv="$(realpath -m "$1")"
  [[ -n "${DET_VENV_CACHE:-}" ]] || return 0
  grep -qx "relocatable = true" "$venv/pyvenv.cfg" 2>/dev/null || return 0
  tmpl="$DET_VENV_CACHE/$(det_venv_key "${@:2}")"
  [[ ! -e "$tmpl" ]] || return 0
  mkdir -p "$DET_VENV_CACHE"
  tmp="$(mktemp -d "$DET_VENV_CACHE/.filling-XXXXXX")"
  rmdir "$tmp"
  if cp -al "$venv" "$tmp" &&
    "$tmp/bin/python" -m pip uninstall --quiet --yes det-platform &&
    rm -f "$tmp"/.det-installed-* && echo "$venv" >"$tmp/.det-template-of" &&
    mv -T "$tmp" "$tmpl" 2>/dev/null; then
    echo "venv: kept as $tmpl for the next run"
    # The two newest (by last use) stay.
    while IFS= read -r old; do
      rm -rf "$old"
    done < <(find "$DET_VENV_CACHE" -mindepth 1 -maxdepth 1 -type d -not -name '.*' -printf '%T@ %p\n' |
      sort -rn | tail -n +3 | cut -d' ' -f2-)
  fi
  rm -rf "$tmp"
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
# changed the harness it carries or the recipe that builds it.
det_image_stale() {
  local created harness
  created="$(docker image inspect -f '{{.Created}}' "$DET_TASK_IMAGE" 2>/dev/null)" || return 0
  harness="$(git -C "$REPO" log -1 --format=%cI -- harness setup.py pyproject.toml \
    infra/task-image infra/build-images.sh 2>/dev/null || true)"
  [[ -n "$harness" ]] || return 1
  [[ "$(date -d "$harness" +%s)" -gt "$(date -d "$created" +%s)" ]]
}

# det_start_dockerd [SUDO...]: start the Docker engine unless it answers (or a dockerd runs
# already: a second one would fail on the first one's socket); wait up to 60 s.
det_start_dockerd() {
  if "$@" docker info >/dev/null 2>&1; then
    return
  fi
  if pgrep -x dockerd >/dev/null 2>&1; then
    echo "dockerd runs but does not answer yet: waiting for it"
  elif [[ -d /run/systemd/system ]]; then
    "$@" systemctl start docker
  else
    echo "starting dockerd in the background (log: /var/log/dockerd.log)"
    "$@" sh -c 'nohup dockerd >>/var/log/dockerd.log 2>&1 &'
  fi
  local _
  for _ in $(seq 60); do
    [[ -S /var/run/docker.sock ]] && "$@" docker info >/dev/null 2>&1 && return
    sleep 1
  done
  echo "dockerd did not start (see /var/log/dockerd.log)" >&2
  return 1
}

# det_test_venv_and_images VENV LOG [SUDO...]: VENV with det-platform[dev] and torch (det_venv),
# and every image the tests use (DET_TEST_IMAGE_TARGETS, infra/build-images.sh, run with SUDO:
# the Debian root file systems need root). The images whose build needs only a venv's pip (the
# task image, the bare Debian ones) build while pip installs det, as scripts/demo.sh does, with
# their log in LOG (printed after); the GC and master images import det, so they follow. Fails
# when either fails. Lines start with DET_LOG_PREFIX (.ci/run: "::: [ci] ").
det_test_venv_and_images() {
  local venv="$1" log="$2" start=$SECONDS early=() late=() target pid rc=0 rcimg=0
  shift 2
  for target in $DET_TEST_IMAGE_TARGETS; do
    case "$target" in
      gc | master) late+=("$target") ;;
      *) early+=("$target") ;;
    esac
  done
  det_venv_seed "$venv" dev "torch==${TORCH_VERSION:-2.13.0}"
  det_venv_create "$venv"
  "$@" env PYTHON="$venv/bin/python" bash "$REPO/infra/build-images.sh" "${early[@]}" >"$log" 2>&1 &
  pid=$!
  det_venv "$venv" dev "torch==${TORCH_VERSION:-2.13.0}" &&
    det_venv_keep "$venv" dev "torch==${TORCH_VERSION:-2.13.0}" || rc=$?
  echo "${DET_LOG_PREFIX:-}venv + pip install det-platform[dev]: $((SECONDS - start)) s (exit $rc)"
  wait "$pid" || rcimg=$?
  cat "$log"
  echo "${DET_LOG_PREFIX:-}images ${early[*]}: done at $((SECONDS - start)) s (exit $rcimg)"
  ((rc == 0)) || return "$rc"
  ((rcimg == 0)) || return "$rcimg"
  ((${#late[@]} == 0)) || "$@" env PYTHON="$venv/bin/python" bash "$REPO/infra/build-images.sh" "${late[@]}"
}
