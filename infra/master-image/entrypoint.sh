#!/bin/sh
# det-master's entry point in its image: the platform's PORT (Cloud Run and others set it) is
# the master's port unless DET_PORT says otherwise.
set -eu
export DET_PORT="${DET_PORT:-${PORT:-8080}}"
exec det-master "$@"
