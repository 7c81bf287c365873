#!/bin/bash
# Provisions the det agent image; aws.pkr.hcl and gcp.pkr.hcl both run it as root with
# `bash -eux`, DEBIAN_FRONTEND=noninteractive and NVIDIA_DRIVER (the driver package suffix).
# Expects the files the templates upload first: /tmp/det-*.whl, /tmp/det-bootstrap.sh and
# /tmp/det-agent.service.

# Base packages and Docker.
cloud-init status --wait || true
apt-get update -q
apt-get install -y -q ca-certificates curl gnupg python3 python3-venv pciutils docker.io
systemctl enable docker
# NVIDIA driver and container toolkit (NVIDIA's apt repository).
apt-get install -y -q nvidia-driver-$NVIDIA_DRIVER nvidia-utils-$NVIDIA_DRIVER
curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' > /etc/apt/sources.list.d/nvidia-container-toolkit.list
apt-get update -q
apt-get install -y -q nvidia-container-toolkit
nvidia-ctk runtime configure --runtime=docker
# The det agent in its own virtualenv.
python3 -m venv /opt/det/venv
/opt/det/venv/bin/pip install -q --upgrade pip
WHEEL=$(ls /tmp/det-*.whl) && /opt/det/venv/bin/pip install -q "$WHEEL[agent]"
ln -sf /opt/det/venv/bin/det-agent /usr/local/bin/det-agent
install -D -m 0755 /tmp/det-bootstrap.sh /usr/local/lib/det/bootstrap.sh
install -D -m 0644 /tmp/det-agent.service /etc/systemd/system/det-agent.service
systemctl daemon-reload
systemctl enable det-agent
# Leave no instance identity behind (on GCE the guest agent recreates host keys and users).
rm -f /tmp/det-*.whl /etc/det/agent.yaml
cloud-init clean --logs
