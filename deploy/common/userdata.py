"""The boot script of the master VM (pure text rendering).

It runs on EVERY boot (AWS: user data as cloud-init MIME with ``scripts-user`` set to
``always``, see :func:`every_boot_user_data`; GCP: the ``startup-script``, which the guest
agent runs at each boot), so ``up`` on an existing stack re-applies master.yaml. The script
itself only writes files and starts ``det-bootstrap.service``, a oneshot unit that retries on
failure and logs to ``/var/log/det-bootstrap.log``; that unit:

1. waits for the dpkg/apt lock (cloud-init and unattended-upgrades hold it on a fresh Ubuntu)
   and installs ``python3-venv`` only if ``ensurepip`` is missing;
2. downloads det's wheel and the constraints file from the cluster's bucket with the
   instance's role (``fetch_release.py``: standard library only), checks the wheel's sha256,
   and installs ``det_platform-X.whl[extras]`` into ``/opt/det`` with ``--constraint`` (only the
   dependencies come from a package index; det itself never by name), unless that exact
   wheel is installed already;
3. writes master.yaml (the machine's private address filled in), turns the cluster secret
   (JSON: ``db_password``, ``initial_user_password``, ``tls_key``, ``tls_cert``, optionally
   ``registry_password``) into a 0600 environment file (every value double-quoted by the rules
   of systemd's ``EnvironmentFile=``, its reader) and the TLS files (key 0600);
4. (re)starts ``det-master``.

When a log target is set, the script starts ``det-logship`` (boot and master logs to CloudWatch
Logs / Cloud Logging; ``logship.py``, standard library only, run by the system's python3) before
anything else, so a failure of apt, of the download or of pip is readable in ``status``; a
failed step also writes one line to the serial console (``failed``).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import importlib.resources
import shlex

from det.deploy.common import registry
from det.deploy.common import tls as tlsmod
from det.deploy.common.masteryaml import LOCAL_IP_PLACEHOLDER
from det.master.provisioner import bootstrap

BOOT_LOG = "/var/log/det-bootstrap.log"
MASTER_LOG = "/var/log/det-master.log"
LIB_DIR = "/usr/local/lib/det"
VENV = "/opt/det"


def fetcher_source() -> str:
    """The standard-library downloader the VMs run before det is installed."""
    return (
        importlib.resources.files("det.master.provisioner")
        .joinpath("fetch_release.py")
        .read_text(encoding="utf-8")
    )


def _gzip_base64(data: bytes) -> str:
    packed = base64.b64encode(gzip.compress(data, compresslevel=9, mtime=0)).decode()
    return "\n".join(packed[i : i + 76] for i in range(0, len(packed), 76))


def fetcher_gzip_base64() -> str:
    """:func:`fetcher_source` compacted, gzipped and in base64 lines (user data is limited to
    16 KiB)."""
    return bootstrap.packed_module("fetch_release.py")


def logship_gzip_base64() -> str:
    """The standard-library log shipper (``logship.py``, beside ``fetch_release.py``), packed
    the same way."""
    return bootstrap.packed_module("logship.py")


@dataclasses.dataclass(frozen=True)
class MasterBoot:
    cloud: str
    """``aws`` or ``gcp``."""
    master_yaml: str
    local_ip: str
    """A shell command printing the machine's private address."""
    fetch_secret: str
    """A shell command printing the cluster secret's JSON (runs after det is installed)."""
    wheel_url: str
    wheel_sha256: str
    """Empty: not checked (only for an organisation's own ``--det-wheel-url``)."""
    constraints_url: str | None
    extras: str
    """The wheel's extras, e.g. ``master,aws``."""
    package_index: str | None = None
    region: str | None = None
    tls: bool = True
    log_target: str | None = None
    """CloudWatch Logs group (AWS) or Cloud Logging log name (GCP); None: no shipping."""
    gcp_project: str | None = None


_PREAMBLE = """#!/bin/bash
# det master boot (rendered by `det deploy`): runs at every boot, starts det-bootstrap.service.
set -euo pipefail
umask 022
mkdir -p {lib} /etc/det /var/lib/det/master
base64 -d > {lib}/fetch_release.py.gz <<'DET_FETCH_RELEASE_PY'
{fetcher}
DET_FETCH_RELEASE_PY
gzip -dc {lib}/fetch_release.py.gz > {lib}/fetch_release.py
{logship}base64 -d > /etc/det/master.yaml.tmpl.gz <<'DET_MASTER_YAML'
{master_yaml}
DET_MASTER_YAML
gzip -dc /etc/det/master.yaml.tmpl.gz > /etc/det/master.yaml.tmpl
base64 -d <<'DET_MASTER_BOOT_SH' | gzip -dc > {lib}/master-boot.sh
{boot}
DET_MASTER_BOOT_SH
chmod 0755 {lib}/master-boot.sh
cat > /etc/systemd/system/det-bootstrap.service <<'DET_UNIT'
[Unit]
Description=det master boot: install det, apply master.yaml, start det-master
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
Type=oneshot
ExecStart=/bin/bash {lib}/master-boot.sh
Restart=on-failure
RestartSec=30
TimeoutStartSec=3600
DET_UNIT
systemctl daemon-reload
systemctl restart --no-block det-bootstrap.service
"""

_BOOT = """#!/bin/bash
# Installs det's own wheel, writes master.yaml and the secrets, starts det-master. Idempotent.
set -euo pipefail
exec >>{boot_log} 2>&1
export DEBIAN_FRONTEND=noninteractive
{values}
log() {{ echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) det-bootstrap: $*" >&2; }}
# A failure gets one line on the serial console (and in the boot log): the command, its line and
# the last line it printed, so `get-console-output` / the serial port says why without SSH.
failed() {{
  local last
  last="$(grep -v ' det-bootstrap: ' {boot_log} | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-300)"
  log "FAILED (exit $1) at line $2: $3${{last:+ -- $last}}"
  echo "det-bootstrap FAILED (exit $1) at line $2: $3${{last:+ -- $last}}" >"${{DET_CONSOLE:-/dev/console}}" 2>/dev/null || true
}}
GAVE_UP=""
trap 'failed $? $LINENO "${{GAVE_UP:-$BASH_COMMAND}}"' ERR
retry() {{
  local n=1
  until "$@"; do
    if [ "$n" -ge 5 ]; then log "giving up: $*"; GAVE_UP="$*"; return 1; fi
    log "attempt $n failed: $*; retrying in $((n * 15))s"
    sleep $((n * 15)); n=$((n + 1))
  done
}}
# apt waits up to 10 minutes for the dpkg lock (cloud-init, unattended-upgrades).
apt_get() {{ apt-get -o DPkg::Lock::Timeout=600 -q "$@"; }}
log "boot: det wheel $DET_WHEEL_URL"
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  retry apt_get update
  retry apt_get install -y python3-venv
fi
mkdir -p /var/lib/det/release
if [ "$(cat {venv}/.det-wheel-sha256 2>/dev/null || true)" != "$DET_WHEEL_SHA256:$DET_WHEEL_URL" ]; then
  WHEEL="/var/lib/det/release/$(basename "$DET_WHEEL_URL")"
  python3 {lib}/fetch_release.py "$DET_WHEEL_URL" "$WHEEL" $DET_WHEEL_SHA256
  PIP_ARGS=()
  if [ -n "$DET_CONSTRAINTS_URL" ]; then
    python3 {lib}/fetch_release.py "$DET_CONSTRAINTS_URL" /var/lib/det/release/constraints.txt
    PIP_ARGS+=(--constraint /var/lib/det/release/constraints.txt)
  fi
  if [ -n "$DET_PACKAGE_INDEX" ]; then PIP_ARGS+=(--index-url "$DET_PACKAGE_INDEX"); fi
  [ -x {venv}/bin/python3 ] || python3 -m venv {venv}
  {venv}/bin/python3 -m pip uninstall -q -y det >/dev/null 2>&1 || true
  retry {venv}/bin/python3 -m pip install -q --disable-pip-version-check "${{PIP_ARGS[@]}}" "$WHEEL[$DET_EXTRAS]"
  echo "$DET_WHEEL_SHA256:$DET_WHEEL_URL" > {venv}/.det-wheel-sha256
  log "installed $(basename "$WHEEL")"
fi
LOCAL_IP="$({local_ip})"
sed "s/{placeholder}/${{LOCAL_IP}}/g" /etc/det/master.yaml.tmpl > /etc/det/master.yaml
mkdir -p {tls_dir}
SECRET_JSON="$(retry {fetch_secret})"
printf '%s' "$SECRET_JSON" | {venv}/bin/python3 -c '
import json, os, sys
s = json.load(sys.stdin)
def write(path, text, mode):
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)
def quoted(v):
    # systemd.exec(5), EnvironmentFile=: a double-quoted value keeps every character (spaces,
    # #, quotes, line breaks) except that a backslash before one of these four is dropped, and
    # nothing is expanded; bash reads it the same. NUL cannot be in an environment.
    if chr(0) in v:
        raise SystemExit("det-bootstrap: a secret value contains NUL")
    out = ""
    for c in v:
        out += chr(92) + c if c in chr(92) + chr(34) + "$`" else c
    return chr(34) + out + chr(34)
pairs = [("DET_DB_PASSWORD", s["db_password"]),
         ("DET_SECURITY_INITIAL_USER_PASSWORD", s["initial_user_password"])]
if s.get("{registry_key}"):
    pairs.append(("{registry_env}", s["{registry_key}"]))
write(sys.argv[1], "".join(k + "=" + quoted(v) + "\\n" for k, v in pairs), 0o600)
if sys.argv[2] == "yes":
    write(sys.argv[3], s["tls_cert"], 0o644)
    write(sys.argv[4], s["tls_key"], 0o600)
' /etc/det/master.env "$DET_TLS" {cert} {key}
unset SECRET_JSON
cat > /etc/systemd/system/det-master.service <<'DET_UNIT'
[Unit]
Description=det master
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=/etc/det/master.env
ExecStart={venv}/bin/det-master --config-file /etc/det/master.yaml
StandardOutput=append:{master_log}
StandardError=append:{master_log}
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
DET_UNIT
systemctl daemon-reload
systemctl enable det-master
systemctl restart det-master
log "det-master (re)started"
"""

_LOGSHIP = """base64 -d > {lib}/logship.py.gz <<'DET_LOGSHIP_PY'
{source}
DET_LOGSHIP_PY
gzip -dc {lib}/logship.py.gz > {lib}/logship.py
cat > /etc/systemd/system/det-logship.service <<'DET_UNIT'
[Unit]
Description=det boot and master logs to {where}
After=network-online.target

[Service]
ExecStart=/usr/bin/python3 {lib}/logship.py {args} {boot_log} {master_log}
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
DET_UNIT
systemctl daemon-reload
systemctl enable det-logship
systemctl restart det-logship
"""


def _values(b: MasterBoot) -> str:
    values = {
        "DET_WHEEL_URL": b.wheel_url,
        "DET_WHEEL_SHA256": b.wheel_sha256,
        "DET_CONSTRAINTS_URL": b.constraints_url or "",
        "DET_PACKAGE_INDEX": b.package_index or "",
        "DET_EXTRAS": b.extras,
        "DET_TLS": "yes" if b.tls else "no",
    }
    if b.region:
        # The fetcher signs S3 requests for this region (not the instance's, which could differ).
        values["AWS_REGION"] = b.region
    return "\n".join(f"{k}={shlex.quote(v)}" for k, v in values.items()) + (
        "\nexport AWS_REGION" if b.region else ""
    )


def _logship(b: MasterBoot) -> str:
    if not b.log_target:
        return ""
    if b.cloud == "aws":
        args = f"--cloud aws --region {shlex.quote(b.region or '')} --target {shlex.quote(b.log_target)}"
        where = "CloudWatch Logs"
    else:
        args = f"--cloud gcp --project {shlex.quote(b.gcp_project or '')} --target {shlex.quote(b.log_target)}"
        where = "Cloud Logging"
    return _LOGSHIP.format(
        where=where,
        lib=LIB_DIR,
        source=logship_gzip_base64(),
        args=args,
        boot_log=BOOT_LOG,
        master_log=MASTER_LOG,
    )


def render_master_boot(b: MasterBoot) -> str:
    """The startup script (a bash script) for ``b``."""
    master_yaml = b.master_yaml if b.master_yaml.endswith("\n") else b.master_yaml + "\n"
    # Gzipped (EC2's user data is limited to 16 KiB): the pools repeat the provider block.
    packed = _gzip_base64(master_yaml.encode())
    boot = _BOOT.format(
        boot_log=BOOT_LOG,
        master_log=MASTER_LOG,
        values=_values(b),
        venv=VENV,
        lib=LIB_DIR,
        local_ip=b.local_ip,
        placeholder=LOCAL_IP_PLACEHOLDER,
        tls_dir=tlsmod.MASTER_CERT_PATH.rsplit("/", 1)[0],
        fetch_secret=b.fetch_secret,
        cert=tlsmod.MASTER_CERT_PATH,
        key=tlsmod.MASTER_KEY_PATH,
        registry_key=registry.SECRET_KEY,
        registry_env=registry.PASSWORD_ENV,
    )
    fetcher = fetcher_gzip_base64()
    return _PREAMBLE.format(
        lib=LIB_DIR,
        fetcher=fetcher,
        boot=_gzip_base64(boot.encode()),
        logship=_logship(b),
        master_yaml=packed,
    )


_YAML_START = "base64 -d > /etc/det/master.yaml.tmpl.gz <<'DET_MASTER_YAML'\n"


def master_yaml_of(script: str) -> str:
    """The master.yaml (placeholder included) that a script or user data rendered by
    :func:`render_master_boot` carries, gzipped and in base64."""
    start = script.index(_YAML_START) + len(_YAML_START)
    packed = script[start : script.index("\nDET_MASTER_YAML\n", start)]
    return gzip.decompress(base64.b64decode(packed)).decode()


_BOOT_START = "base64 -d <<'DET_MASTER_BOOT_SH' | gzip -dc > "


def boot_script_of(script: str) -> str:
    """The inner boot script (``master-boot.sh``, run by ``det-bootstrap.service``) that a
    script or user data rendered by :func:`render_master_boot` carries, gzipped and in base64
    (EC2's 16 KiB)."""
    start = script.index("\n", script.index(_BOOT_START)) + 1
    packed = script[start : script.index("\nDET_MASTER_BOOT_SH\n", start)]
    return gzip.decompress(base64.b64decode(packed)).decode()


_BOUNDARY = "==DET-BOOT-BOUNDARY=="


def every_boot_user_data(script: str) -> str:
    """EC2 user data that cloud-init runs at every boot, not only the first (a MIME multipart:
    ``cloud_final_modules`` with ``scripts-user`` set to ``always``, then the script)."""
    return (
        f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"\n'
        "MIME-Version: 1.0\n\n"
        f"--{_BOUNDARY}\n"
        'Content-Type: text/cloud-config; charset="us-ascii"\n'
        "MIME-Version: 1.0\n"
        'Content-Disposition: attachment; filename="det-every-boot.txt"\n\n'
        "#cloud-config\n"
        "cloud_final_modules:\n"
        "- [scripts-user, always]\n\n"
        f"--{_BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n'
        "MIME-Version: 1.0\n"
        'Content-Disposition: attachment; filename="det-master-boot.sh"\n\n'
        f"{script}\n"
        f"--{_BOUNDARY}--\n"
    )
