#!/usr/bin/env bash
# Starts N "machines" on this host and removes them again, printing what each phase took:
# privileged containers of det-base:bookworm with Debian's docker.io, each with its own Docker
# engine (storage on a volume of its own) and det installed from a wheel of this tree, on a
# bridge network of their own; the task image (det-official:py3.11-torch, infra/build-images.sh
# torch) pushed once to a docker-registry on this host and pulled by every engine
# (tests/e2e/machines.py; the e2e tests start the same machines with a master and agents).
#
#   bash scripts/machines.sh              # 2 machines, cold
#   bash scripts/machines.sh -n 3 --hold  # 3 machines, kept up until Enter
#   DET_MACHINES_CACHE=DIR bash scripts/machines.sh   # keeps the registry's storage in DIR and
#                                         # each engine's volume (det-machines-cache-HASH-N):
#                                         # warm; one session at a time holds DIR, another
#                                         # runs uncached (tests/e2e/machines.py)
#
# Needs root (or the docker group), a Docker engine, docker-registry and htpasswd
# (apache2-utils), and this repository's venv (.venv, or PYTHON).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
cd "$REPO"
exec "$PYTHON" -m tests.e2e.machines "$@"
