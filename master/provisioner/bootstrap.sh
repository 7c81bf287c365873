#!/bin/bash
# det agent bootstrap: the user data (cloud-init) a fresh agent VM runs, and the script the
# agent image runs at boot. It works on the det agent image and on a stock Ubuntu or Deep
# Learning AMI: whatever is missing (Docker, Python, the agent) is installed first.
#
# Steps: start the log shipper (DET_LOG_TARGET) -> install what is missing (det from the master's own wheel, see ensure_agent) -> find the agent id (AWS: instance id from IMDSv2; GCP:
# instance name from the metadata server) -> write agent.yaml -> trade the one-time enrollment
# ticket for the agent's own token (root-only file) -> start det-agent.
#
# The master renders the values block below (see det.master.provisioner.bootstrap); anything
# left unset there comes from the environment, so the same file also runs by hand.
set -euo pipefail

# DET_RENDERED_VALUES

: "${DET_MASTER_URL:=}"
: "${DET_AGENT_TOKEN:=}"
: "${DET_ENROLL_TICKET:=}"         # one-time: exchanged at the master for the agent's own token
: "${DET_AGENT_TOKEN_FILE:=/etc/det/agent_token}"
: "${DET_RESOURCE_POOL:=default}"
: "${DET_CLUSTER_ID:=}"
: "${DET_CLOUD:=auto}"
: "${DET_IMDS_URL:=http://169.254.169.254}"
: "${DET_GCE_METADATA_URL:=http://metadata.google.internal}"
: "${DET_AGENT_CONFIG:=/etc/det/agent.yaml}"
: "${DET_AGENT_VENV:=/opt/det/venv}"
: "${DET_AGENT_WHEEL_URL:=}"       # det's wheel: s3://, gs:// (the VM's role) or https://
: "${DET_AGENT_WHEEL_SHA256:=}"
: "${DET_AGENT_CONSTRAINTS_URL:=}" # pins det's dependencies
: "${DET_AGENT_PACKAGE_INDEX:=}"   # where pip finds the dependencies (default: pip's own)
: "${DET_AGENT_EXTRAS:=agent}"
: "${DET_AGENT_PIP_SPEC:=}"        # instead of a wheel URL: a pip requirement (never the bare name "det": det-platform)
: "${DET_MASTER_CERT_B64:=}"       # the master's TLS certificate (PEM, base64)
: "${DET_MASTER_CERT_NAME:=}"
: "${DET_MASTER_CERT_FILE:=/etc/det/master.crt}"
: "${DET_LIB_DIR:=/usr/local/lib/det}"
: "${DET_BOOT_LOG:=/var/log/det-bootstrap.log}"
: "${DET_AGENT_LOG:=/var/log/det-agent.log}"
: "${DET_LOG_TARGET:=}"            # ship the two logs there: CloudWatch Logs group / Cloud Logging log
: "${DET_CONSOLE:=/dev/console}"   # the serial console: one line when the boot fails
: "${DET_STARTUP_SCRIPT_B64:=}"
: "${DET_SYSTEMD:=auto}" # auto | yes | no: run det-agent as a systemd unit or exec it

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) det-bootstrap: $*" >&2; }

# Run "$@" up to 5 times, 15 s, 30 s... apart (package mirrors and buckets have bad minutes).
retry() {
  local n=1
  until "$@"; do
    if [ "$n" -ge "${DET_RETRY_ATTEMPTS:-5}" ]; then log "giving up: $*"; return 1; fi
    log "attempt $n failed: $*; retrying"
    sleep $((n * ${DET_RETRY_SLEEP:-15})); n=$((n + 1))
  done
}

aws_instance_id() {
  local token
  token=$(curl -fsS --max-time 3 -X PUT "$DET_IMDS_URL/latest/api/token" \
    -H "X-aws-ec2-metadata-token-ttl-seconds: 300") || return 1
  curl -fsS --max-time 3 -H "X-aws-ec2-metadata-token: $token" \
    "$DET_IMDS_URL/latest/meta-data/instance-id"
}

gcp_instance_name() {
  curl -fsS --max-time 3 -H "Metadata-Flavor: Google" \
    "$DET_GCE_METADATA_URL/computeMetadata/v1/instance/name"
}

# Print the agent id for cloud $1 (aws | gcp | auto; auto tries both, then the hostname).
discover_agent_id() {
  case "${1:-auto}" in
    aws) aws_instance_id ;;
    gcp) gcp_instance_name ;;
    auto) aws_instance_id 2>/dev/null || gcp_instance_name 2>/dev/null || hostname ;;
    *) log "unknown cloud: $1"; return 2 ;;
  esac
}

# The metadata service can lag the boot by a few seconds: retry before giving up.
discover_agent_id_with_retry() {
  local id attempt
  for attempt in $(seq 1 "${DET_DISCOVERY_ATTEMPTS:-30}"); do
    if id=$(discover_agent_id "$DET_CLOUD") && [ -n "$id" ]; then
      echo "$id"
      return 0
    fi
    log "agent id not available yet (attempt $attempt)"
    sleep "${DET_DISCOVERY_SLEEP:-2}"
  done
  return 1
}

yaml_quote() {
  local escaped=${1//\'/\'\'}
  printf "'%s'" "$escaped"
}

# Write agent.yaml for agent id $1 to path $2 (keys of det.agent's AgentConfig).
write_agent_config() {
  local notice=none
  case "$DET_CLOUD" in aws | gcp) notice=$DET_CLOUD ;; esac
  mkdir -p "$(dirname "$2")"
  (
    umask 077
    {
      echo "master_url: $(yaml_quote "$DET_MASTER_URL")"
      echo "agent_id: $(yaml_quote "$1")"
      if [ -n "$DET_ENROLL_TICKET" ]; then
        echo "agent_token_file: $(yaml_quote "$DET_AGENT_TOKEN_FILE")"
      else
        echo "agent_token: $(yaml_quote "$DET_AGENT_TOKEN")"
      fi
      echo "resource_pool: $(yaml_quote "$DET_RESOURCE_POOL")"
      echo "preemption_notice: $notice"
      if [ -n "$DET_MASTER_CERT_B64" ]; then
        echo "master_cert_file: $(yaml_quote "$DET_MASTER_CERT_FILE")"
      fi
      if [ -n "$DET_MASTER_CERT_NAME" ]; then
        echo "master_cert_name: $(yaml_quote "$DET_MASTER_CERT_NAME")"
      fi
      if [ "$notice" = aws ] && [ "$DET_IMDS_URL" != "http://169.254.169.254" ]; then
        echo "preemption_metadata_url: $(yaml_quote "$DET_IMDS_URL")"
      fi
      if [ "$notice" = gcp ] && [ "$DET_GCE_METADATA_URL" != "http://metadata.google.internal" ]; then
        echo "preemption_metadata_url: $(yaml_quote "$DET_GCE_METADATA_URL")"
      fi
    } >"$2"
  )
}

# apt waits up to 10 minutes for the dpkg lock (cloud-init and unattended-upgrades hold it
# on a fresh Ubuntu).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  retry apt-get -o DPkg::Lock::Timeout=600 update -q &&
    retry apt-get -o DPkg::Lock::Timeout=600 install -y -q "$@"
}

ensure_docker() {
  if command -v docker >/dev/null 2>&1; then return 0; fi
  log "installing Docker"
  apt_install docker.io
  systemctl enable --now docker
}

# GPU machines without the NVIDIA stack (a stock Ubuntu image): best effort, the agent image
# and the Deep Learning AMIs already have it.
ensure_nvidia() {
  if ! lspci 2>/dev/null | grep -qi nvidia; then return 0; fi
  if command -v nvidia-smi >/dev/null 2>&1 && command -v nvidia-ctk >/dev/null 2>&1; then
    return 0
  fi
  log "installing the NVIDIA driver and container toolkit"
  apt_install ubuntu-drivers-common && ubuntu-drivers install || log "driver install failed"
  apt_install nvidia-container-toolkit || log "nvidia-container-toolkit not in the apt sources"
  if command -v nvidia-ctk >/dev/null 2>&1; then
    nvidia-ctk runtime configure --runtime=docker && systemctl restart docker
  fi
}

# fetch_release.py (standard library only: S3 with the instance role, GCS with the service
# account, https) and logship.py are in DET_LIB_DIR: the user data the master renders puts them
# there (det.master.provisioner.bootstrap).

# The log shipper (standard library only, signs with fetch_release.py): started before
# anything is installed, so a failure of apt, the download or pip reaches `det deploy status`.
start_logship() {
  if [ -z "$DET_LOG_TARGET" ]; then return 0; fi
  case "$DET_CLOUD" in aws | gcp) ;; *) return 0 ;; esac
  local py
  py=$(command -v python3) || { log "no python3: boot logs are not shipped"; return 0; }
  if [ ! -f "$DET_LIB_DIR/logship.py" ]; then log "no $DET_LIB_DIR/logship.py: boot logs are not shipped"; return 0; fi
  local cmd="$py $DET_LIB_DIR/logship.py --cloud $DET_CLOUD --target $DET_LOG_TARGET $DET_BOOT_LOG $DET_AGENT_LOG"
  if use_systemd; then
    printf '[Unit]\nDescription=det boot and agent logs\n[Service]\nExecStart=%s\nRestart=always\nRestartSec=10\n[Install]\nWantedBy=multi-user.target\n' "$cmd" >/etc/systemd/system/det-logship.service
    systemctl daemon-reload && systemctl enable det-logship && systemctl restart det-logship
  else
    # shellcheck disable=SC2086 # the values have no blanks (log group, paths)
    setsid nohup $cmd >/dev/null 2>&1 &
  fi
  log "shipping $DET_BOOT_LOG and $DET_AGENT_LOG to $DET_LOG_TARGET"
}

# One line on the serial console when the boot fails: our last message and the last line of
# the step that failed (pip's error, say), read with `get-console-output` / the serial port.
boot_failed() {
  sleep 1
  local ours theirs
  ours=$(grep ' det-bootstrap: ' "$DET_BOOT_LOG" 2>/dev/null | tail -n 1 | cut -d' ' -f3- | cut -c1-200)
  theirs=$(grep -v -e ' det-bootstrap: ' -e '^[[:space:]]*$' "$DET_BOOT_LOG" 2>/dev/null | tail -n 1 | cut -c1-200)
  echo "det-bootstrap FAILED (exit $1): $ours${theirs:+ -- $theirs}" >>"$DET_CONSOLE" 2>/dev/null || true
}

use_systemd() {
  [ "$DET_SYSTEMD" = yes ] || { [ "$DET_SYSTEMD" = auto ] && [ -d /run/systemd/system ]; }
}

installed_marker() { cat "$DET_AGENT_VENV/.det-wheel" 2>/dev/null || true; }

# Install det from the master's own wheel (hash-checked), dependencies pinned by its
# constraints; never det by name from a package index.
ensure_agent() {
  local want="$DET_AGENT_WHEEL_SHA256:$DET_AGENT_WHEEL_URL"
  if command -v det-agent >/dev/null 2>&1; then
    if [ -z "$DET_AGENT_WHEEL_URL" ] || [ "$(installed_marker)" = "$want" ]; then return 0; fi
  fi
  if [ -z "$DET_AGENT_WHEEL_URL" ] && [ -z "$DET_AGENT_PIP_SPEC" ]; then
    log "det-agent is not installed and no det wheel was given (DET_AGENT_WHEEL_URL)"
    return 2
  fi
  # Ubuntu ships python3 without ensurepip (python3-venv), which venv needs.
  python3 -c 'import ensurepip' >/dev/null 2>&1 || apt_install python3 python3-venv
  [ -x "$DET_AGENT_VENV/bin/python3" ] || python3 -m venv "$DET_AGENT_VENV"
  local pip_args=() spec
  if [ -n "$DET_AGENT_PACKAGE_INDEX" ]; then pip_args+=(--index-url "$DET_AGENT_PACKAGE_INDEX"); fi
  if [ -n "$DET_AGENT_WHEEL_URL" ]; then
    local wheel="$DET_LIB_DIR/release/${DET_AGENT_WHEEL_URL##*/}"
    mkdir -p "$DET_LIB_DIR/release"
    log "installing det from $DET_AGENT_WHEEL_URL"
    # shellcheck disable=SC2086 # an empty hash is no argument
    python3 "$DET_LIB_DIR/fetch_release.py" "$DET_AGENT_WHEEL_URL" "$wheel" $DET_AGENT_WHEEL_SHA256
    if [ -n "$DET_AGENT_CONSTRAINTS_URL" ]; then
      python3 "$DET_LIB_DIR/fetch_release.py" "$DET_AGENT_CONSTRAINTS_URL" "$DET_LIB_DIR/release/constraints.txt"
      pip_args+=(--constraint "$DET_LIB_DIR/release/constraints.txt")
    fi
    spec="$wheel[$DET_AGENT_EXTRAS]"
  else
    log "installing the det agent ($DET_AGENT_PIP_SPEC)"
    spec=$DET_AGENT_PIP_SPEC
  fi
  "$DET_AGENT_VENV/bin/python3" -m pip uninstall -q -y det >/dev/null 2>&1 || true
  retry "$DET_AGENT_VENV/bin/python3" -m pip install -q --disable-pip-version-check "${pip_args[@]}" "$spec"
  echo "$want" >"$DET_AGENT_VENV/.det-wheel"
  ln -sf "$DET_AGENT_VENV/bin/det-agent" /usr/local/bin/det-agent
}

write_master_cert() {
  if [ -z "$DET_MASTER_CERT_B64" ]; then return 0; fi
  mkdir -p "$(dirname "$DET_MASTER_CERT_FILE")"
  echo "$DET_MASTER_CERT_B64" | base64 -d >"$DET_MASTER_CERT_FILE"
  chmod 0644 "$DET_MASTER_CERT_FILE"
}

run_startup_script() {
  if [ -z "$DET_STARTUP_SCRIPT_B64" ]; then return 0; fi
  local script
  script=$(mktemp)
  echo "$DET_STARTUP_SCRIPT_B64" | base64 -d >"$script"
  log "running the pool's startup_script"
  bash "$script" || log "startup_script exited with $?"
  rm -f "$script"
}

# The ticket is spent here, before the agent (and any task) runs: a task that reads the user
# data or the metadata server later finds a ticket the master refuses. A reboot keeps the token.
enroll_agent() {
  if [ -z "$DET_ENROLL_TICKET" ]; then return 0; fi
  log "enrolling with the master"
  (
    umask 077
    env -i PATH="$PATH" DET_ENROLL_TICKET="$DET_ENROLL_TICKET" \
      det-agent enroll --config-file "$DET_AGENT_CONFIG"
  )
  unset DET_ENROLL_TICKET
}

start_agent() {
  local bin
  bin=$(command -v det-agent)
  if use_systemd; then
    cat >/etc/systemd/system/det-agent.service <<UNIT
[Unit]
Description=det agent
After=network-online.target docker.service
Wants=network-online.target docker.service

[Service]
ExecStart=$bin --config-file $DET_AGENT_CONFIG
StandardOutput=append:$DET_AGENT_LOG
StandardError=append:$DET_AGENT_LOG
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable det-agent
    systemctl restart det-agent
  else
    trap - EXIT
    exec "$bin" --config-file "$DET_AGENT_CONFIG"
  fi
}

main() {
  if [ -z "$DET_MASTER_URL" ]; then
    log "DET_MASTER_URL is not set"
    return 2
  fi
  if [ -n "$DET_BOOT_LOG" ] && touch "$DET_BOOT_LOG" 2>/dev/null; then
    exec > >(tee -a "$DET_BOOT_LOG") 2>&1
  fi
  trap 'rc=$?; [ "$rc" = 0 ] || boot_failed "$rc"' EXIT
  start_logship
  ensure_docker
  ensure_nvidia
  ensure_agent
  write_master_cert
  run_startup_script
  local agent_id
  agent_id=$(discover_agent_id_with_retry) || { log "cannot find the agent id"; return 1; }
  log "agent id: $agent_id"
  write_agent_config "$agent_id" "$DET_AGENT_CONFIG"
  enroll_agent
  start_agent
}

# Sourcing the file (tests) defines the functions without running anything.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
