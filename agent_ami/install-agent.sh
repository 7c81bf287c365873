#!/bin/bash
# Provisions the det agent image; det-agent.pkr.hcl runs it as root with `bash -eux` on both
# clouds' GPU base images (AWS Deep Learning Base GPU AMI, GCP Deep Learning VM), which already
# carry the NVIDIA driver, Docker and the NVIDIA container toolkit: nothing here installs them.
#
# Environment (set by the template):
#   DET_WHEEL          det's wheel, uploaded by the template's file provisioner
#   DET_WHEEL_SHA256   its sha256, checked before pip sees the file
#   DET_PACKAGE_INDEX  optional index for det's dependencies (det itself only from DET_WHEEL)
#   DET_TASK_IMAGES    space-separated task images to pre-pull
# Also expects /tmp/det-bootstrap.sh and /tmp/det-agent.service (uploaded first).

retry() {
  local n=1
  until "$@"; do
    if [ "$n" -ge 5 ]; then echo "giving up: $*" >&2; return 1; fi
    sleep $((n * 15)); n=$((n + 1))
  done
}

cloud-init status --wait || true

# The base image must bring the GPU stack; fail the build early if it does not.
command -v nvidia-smi
command -v nvidia-ctk
command -v docker
systemctl enable --now docker

# det's wheel: the exact file we were given, or nothing.
echo "$DET_WHEEL_SHA256  $DET_WHEEL" | sha256sum --check --strict -

# The det agent in its own virtualenv (python3-venv, if the image lacks ensurepip).
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  retry apt-get -o DPkg::Lock::Timeout=600 update -q
  retry apt-get -o DPkg::Lock::Timeout=600 install -y -q python3-venv
fi
python3 -m venv /opt/det/venv
PIP_ARGS=(-q --disable-pip-version-check)
if [ -n "${DET_PACKAGE_INDEX:-}" ]; then PIP_ARGS+=(--index-url "$DET_PACKAGE_INDEX"); fi
retry /opt/det/venv/bin/python3 -m pip install "${PIP_ARGS[@]}" "$DET_WHEEL[agent]"
ln -sf /opt/det/venv/bin/det-agent /usr/local/bin/det-agent
install -D -m 0755 /tmp/det-bootstrap.sh /usr/local/lib/det/bootstrap.sh
install -D -m 0644 /tmp/det-agent.service /etc/systemd/system/det-agent.service
systemctl daemon-reload
systemctl enable det-agent

# Pre-pull the task images, so a new agent's first trial does not wait on a multi-GB pull.
for image in $DET_TASK_IMAGES; do
  retry docker pull "$image"
done

# Leave no instance identity behind (on GCE the guest agent recreates host keys and users).
rm -f "$DET_WHEEL" /tmp/det-bootstrap.sh /tmp/det-agent.service /etc/det/agent.yaml
cloud-init clean --logs
