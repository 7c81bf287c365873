"""The bootstrap script a fresh master VM runs (pure text rendering).

It installs det into a venv, writes master.yaml (with the machine's private address filled
in), turns the cluster secret (JSON: ``db_password``, ``initial_user_password``) into a 0600
environment file and starts the ``det-master`` systemd unit. It is idempotent, so a reboot
re-running it is harmless.
"""

from __future__ import annotations

import shlex

from det.deploy.common.masteryaml import LOCAL_IP_PLACEHOLDER

_TEMPLATE = """#!/bin/bash
set -euo pipefail
exec >>/var/log/det-bootstrap.log 2>&1
export DEBIAN_FRONTEND=noninteractive
mkdir -p /etc/det /var/lib/det/master
if [ ! -x /opt/det/bin/det-master ]; then
  apt-get update -y
  apt-get install -y python3-venv python3-pip curl
  python3 -m venv /opt/det
  /opt/det/bin/pip install --upgrade pip
  /opt/det/bin/pip install {package}
fi
LOCAL_IP="$({local_ip})"
cat > /etc/det/master.yaml.tmpl <<'DET_MASTER_YAML'
{master_yaml}DET_MASTER_YAML
sed "s/{placeholder}/${{LOCAL_IP}}/g" /etc/det/master.yaml.tmpl > /etc/det/master.yaml
umask 077
{fetch_secret} | /opt/det/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
print("DET_DB_PASSWORD=" + s["db_password"])
print("DET_SECURITY_INITIAL_USER_PASSWORD=" + s["initial_user_password"])
' > /etc/det/master.env
umask 022
cat > /etc/systemd/system/det-master.service <<'DET_UNIT'
[Unit]
Description=det master
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=/etc/det/master.env
ExecStart=/opt/det/bin/det-master --config-file /etc/det/master.yaml
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
DET_UNIT
systemctl daemon-reload
systemctl enable det-master
systemctl restart det-master
"""


def render_bootstrap(*, master_yaml: str, package: str, local_ip: str, fetch_secret: str) -> str:
    """``local_ip`` and ``fetch_secret`` are shell commands printing the address / secret JSON."""
    if not master_yaml.endswith("\n"):
        master_yaml += "\n"
    return _TEMPLATE.format(
        package=shlex.quote(package),
        local_ip=local_ip,
        master_yaml=master_yaml,
        placeholder=LOCAL_IP_PLACEHOLDER,
        fetch_secret=fetch_secret,
    )
