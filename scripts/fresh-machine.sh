#!/usr/bin/env bash
# Runs a command on a fresh machine and times it: a container of a clean Debian bookworm root file
# system (det-base:bookworm: minbase with python3, python3-venv and ca-certificates; no Docker,
# git, mmdebstrap or pip cache) with a fresh clone of this repository's committed HEAD in
# /root/det and a Docker volume for the Docker engine the command starts inside (docker-in-docker
# with Debian's docker.io, overlay2 on the volume). It prints each phase's seconds, each step of
# demo.sh (its `==> [Ns]` lines) with its wall and CPU seconds, and the host's load average while
# the command ran, then removes the container and its volume (nothing is left on the host's
# engine: the nested engine's images go with the volume).
#
#   bash scripts/fresh-machine.sh                         # times `bash scripts/demo.sh`
#   bash scripts/fresh-machine.sh --readme                # the demo, then test.sh's installs
#   bash scripts/fresh-machine.sh bash -c 'uname -a'      # any command, in the clone
#
# The container gets what every machine of this kind has for package installs: the host's CA
# bundle (registries are reached through a TLS-inspecting proxy), and, when present, the host's
# pip configuration and the local wheel directories and indexes it names (read-only), so pip
# inside resolves as on the host. Nothing else of the host is visible. It runs with what
# --privileged would give (every capability, no seccomp or AppArmor profile): a test machine's
# tool, for commands from this repository only.
# Environment: DET_FRESH_KEEP=1 keeps the container and volume (prints how to remove them);
#              DET_FRESH_LOG=FILE also writes the command's output there;
#              DET_FRESH_REF=REV the revision to clone (default HEAD).
# Needs root (or the docker group) and a Docker engine.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="det-base:bookworm"
REF="${DET_FRESH_REF:-HEAD}"
CMD=("$@")
((${#CMD[@]})) || CMD=(bash scripts/demo.sh)
if [[ "${CMD[*]}" == "--readme" ]]; then
  # The README's two commands: the demo, then the test command's installs (its venv with the dev
  # extra and torch, the other images) with pytest collecting only.
  # The demo leaves the full task image to test.sh here (two builds of it would race).
  CMD=(bash -c 'DET_DEMO_FULL_IMAGE=0 bash scripts/demo.sh && echo "==> [   0s] README command 2, its installs: bash scripts/test.sh --collect-only -q" && bash scripts/test.sh --collect-only -q | tail -n 3')
fi
START=$SECONDS
NAME="det-fresh-$$-$RANDOM"
VOLUME="$NAME-docker"
WORK="$(mktemp -d -t det-fresh.XXXXXX)"
TIMINGS=()

say() { echo "[fresh-machine] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
phase_done() { TIMINGS+=("$(printf '%-34s %5d s' "$1" "$2")"); }

cleanup() {
  local rc=$?
  [[ -z "${LOAD_PID:-}" ]] || { kill "$LOAD_PID"; wait "$LOAD_PID"; } 2>/dev/null || true
  if [[ -n "${DET_FRESH_KEEP:-}" ]]; then
    say "kept: docker exec -it $NAME bash; remove with: docker rm -f $NAME && docker volume rm $VOLUME"
  else
    local t=$SECONDS
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    docker volume rm -f "$VOLUME" >/dev/null 2>&1 || true
    phase_done "remove container and volume" $((SECONDS - t))
  fi
  rm -rf "$WORK"
  if ((${#TIMINGS[@]})); then
    say "timings:"
    printf '  %s\n' "${TIMINGS[@]}" >&2
    printf '  %-34s %5d s\n' "total" $((SECONDS - START)) >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "cannot reach the Docker engine"

t=$SECONDS
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "$BASE_IMAGE missing: building it (infra/build-images.sh base)"
  bash "$REPO/infra/build-images.sh" base
fi
phase_done "host: $BASE_IMAGE" $((SECONDS - t))

t=$SECONDS
git clone --quiet --no-local "$REPO" "$WORK/det"
git -C "$WORK/det" checkout --quiet --detach "$(git -C "$REPO" rev-parse "$REF")"
say "clone of $(git -C "$WORK/det" log -1 --format='%h %s')"
phase_done "host: fresh clone" $((SECONDS - t))

t=$SECONDS
mounts=()
for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf /etc/xdg/pip; do
  [[ -e "$f" ]] && mounts+=(-v "$f:$f:ro")
done
[[ -f "$HOME/.config/pip/pip.conf" ]] && mounts+=(-v "$HOME/.config/pip/pip.conf:/root/.config/pip/pip.conf:ro")
# The directories the pip configuration names (find-links, file:// indexes), read-only.
while read -r dir; do
  [[ -d "$dir" ]] && mounts+=(-v "$dir:$dir:ro")
done < <(python3 -m pip config list 2>/dev/null | grep -oE "(file://)?/[^' ]+" | sed 's|^file://||; s|/simple$||' | sort -u)
envs=()
for v in $(env | grep -oE '^(PIP_[A-Z_]+|SSL_CERT_FILE|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)=' | tr -d =); do
  envs+=(-e "$v")
done
docker volume create "$VOLUME" >/dev/null
# What --privileged gives a Docker engine inside, spelled out: --privileged asks for every
# capability, and a host engine whose own bounding set lacks one (CAP_SYS_RESOURCE, on some
# sandboxed VMs) cannot start such a container. So: every capability the host has, no seccomp or
# AppArmor profile, /proc and /sys unmasked, a cgroup namespace of its own, and /sys and the
# cgroup hierarchies remounted read-write inside.
caps=(--cap-add ALL)
bnd="$(awk '/^CapBnd/ {print $2}' /proc/self/status)"
(((16#$bnd >> 24) & 1)) || caps+=(--cap-drop SYS_RESOURCE)
# --init: an init that reaps orphans, as a machine's does (a daemon such as PostgreSQL's
# postmaster, started through pg_ctl, is reparented to PID 1; with `sleep` as PID 1 it stayed a
# zombie after it stopped, and looked alive to anything that asked its PID).
docker run -d --init --name "$NAME" --hostname det-fresh "${caps[@]}" \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  --security-opt systempaths=unconfined --cgroupns private \
  -v "$VOLUME:/var/lib/docker" "${mounts[@]}" "${envs[@]}" \
  "$BASE_IMAGE" sleep infinity >/dev/null
docker exec "$NAME" sh -c 'mount -o remount,rw /sys && for d in /sys/fs/cgroup/*/; do
  mount -o remount,bind,rw "$d"; done' || die "could not make /sys and the cgroups writable inside"
docker cp -q "$WORK/det" "$NAME:/root/det"
phase_done "host: start container, copy clone" $((SECONDS - t))

# The host's 1-minute load average every 10 s while the command runs.
LOADS="$WORK/loadavg"
(while :; do cut -d' ' -f1 /proc/loadavg >>"$LOADS"; sleep 10; done) &
LOAD_PID=$!

# The CPU seconds the container used so far (everything in it, the nested engine's containers
# included): a figure that depends less on the host's load than the wall clock's.
CGROUP_ID="$(docker inspect -f '{{.Id}}' "$NAME")"
cpu_seconds() {
  local f
  for f in "/sys/fs/cgroup/cpuacct/docker/$CGROUP_ID/cpuacct.usage" \
    "/sys/fs/cgroup/system.slice/docker-$CGROUP_ID.scope/cpu.stat" \
    "/sys/fs/cgroup/docker/$CGROUP_ID/cpu.stat"; do
    [[ -r "$f" ]] || continue
    case "$f" in
      *.usage) awk '{printf "%d", $1 / 1e9}' "$f" ;;
      *) awk '/^usage_usec/ {printf "%d", $2 / 1e6}' "$f" ;;
    esac
    return
  done
  echo 0  # no cgroup file found: the CPU columns read 0
}

say "running in $NAME: ${CMD[*]}"
t=$SECONDS
rc=0
quoted="$(printf '%q ' "${CMD[@]}")"
MARKS="$WORK/marks"
cpu0="$(cpu_seconds)"
# Each line that starts a step of demo.sh (`==> [  12s] name`) is stamped with the wall clock and
# the container's CPU, for the per-step table below.
docker exec -w /root/det "$NAME" bash -c "$quoted" 2>&1 | tee ${DET_FRESH_LOG:+"$DET_FRESH_LOG"} \
  | while IFS= read -r line; do
    printf '%s\n' "$line"
    if [[ "$line" == "==> ["* ]]; then
      printf '%s %s %s\n' "$SECONDS" "$(cpu_seconds)" "${line#*] }" >>"$MARKS"
    fi
  done || rc=$?
cpu1="$(cpu_seconds)"
phase_done "command (exit $rc)" $((SECONDS - t))
if [[ -s "$MARKS" ]]; then
  TIMINGS+=("steps of the command (wall s, container CPU s):")
  while read -r s c name; do
    [[ -n "${prev_name:-}" ]] && TIMINGS+=("$(printf '  %-40.40s %5d %5s' "$prev_name" $((s - prev_s)) "$((c - prev_c))")")
    prev_s=$s prev_c=$c prev_name=$name
  done <"$MARKS"
  TIMINGS+=("$(printf '  %-40.40s %5d %5s' "$prev_name" $((SECONDS - prev_s)) "$((cpu1 - prev_c))")")
fi
TIMINGS+=("container CPU while the command ran: $((cpu1 - cpu0)) s")
{ kill "$LOAD_PID"; wait "$LOAD_PID"; } 2>/dev/null || true
LOAD_PID=""
if [[ -s "$LOADS" ]]; then
  TIMINGS+=("$(sort -n "$LOADS" | awk '{a[NR]=$1} END {printf "host load average (1 min) while it ran: min %s, median %s, max %s (%d samples)", a[1], a[int((NR+1)/2)], a[NR], NR}')")
fi
exit "$rc"
