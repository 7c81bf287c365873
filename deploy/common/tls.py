"""The master's TLS certificate: generated once per cluster, or given (``--master-tls-cert`` /
``--master-tls-key``, Determined's flags).

A generated certificate is self-signed for the fixed name :data:`CERT_NAME` (plus
``localhost``): the master's address is not known before ``up``, so clients verify the name
instead (``DET_MASTER_CERT_NAME=det-master`` with ``DET_MASTER_CERT_FILE``, Determined's
variables; agents ``master_cert_name`` / ``master_cert_file``). The key goes into the cluster's
secret (``tls_key``, ``tls_cert``), never into user data; the certificate is saved beside the
Pulumi state so a later ``up`` re-uses it and the user can point clients at it.

A generated certificate is valid for :data:`VALID_DAYS` (825) days, the most Apple's platforms
accept for a TLS server certificate, and ``up`` replaces it with a new one (new key) when fewer
than :data:`RENEW_DAYS` remain, or when it is valid for longer (made by an older det): see
:func:`renewal_reason`. The new certificate's digest is part of the agents' config hash, so the
master restarts with it and the agents that trust the old one are replaced.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from requests.adapters import HTTPAdapter

from det.deploy.common.errors import DeployError

CERT_NAME = "det-master"
TLS_PORT = 8443
PLAIN_PORT = 8080
# Paths on the master VM (master.yaml ``security.tls``).
MASTER_CERT_PATH = "/etc/det/tls/master.crt"
MASTER_KEY_PATH = "/etc/det/tls/master.key"
# Where agents keep the master's certificate (agent.yaml ``master_cert_file``).
AGENT_CERT_PATH = "/etc/det/master.crt"
# Apple: "TLS server certificates must have a validity period of 825 days or fewer"
# (https://support.apple.com/en-us/103769); private roots are held to it too.
VALID_DAYS = 825
RENEW_DAYS = 30


@dataclasses.dataclass(frozen=True)
class TlsMaterial:
    cert_pem: str
    key_pem: str
    cert_file: Path | None = None
    """Where the certificate is saved on this machine (None: not saved, e.g. a dry-run)."""
    cert_name: str = CERT_NAME
    """The name clients check (``DET_MASTER_CERT_NAME``)."""


def generate(common_name: str = CERT_NAME, *, now: dt.datetime | None = None) -> TlsMaterial:
    """A self-signed ECDSA P-256 certificate for ``common_name`` and ``localhost``."""

    now = now or dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(minutes=5)  # clocks a little behind ours
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(common_name), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return TlsMaterial(cert_pem=cert_pem, key_pem=key_pem)


def load(cert_path: str, key_path: str) -> TlsMaterial:
    """A given certificate and key (PEM); checks that they belong together."""

    try:
        cert_pem = Path(cert_path).read_text()
        key_pem = Path(key_path).read_text()
    except OSError as e:
        raise DeployError(
            f"--master-tls-cert/--master-tls-key: {e.strerror}: {e.filename}"
        ) from None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except ValueError:
        raise DeployError(f"--master-tls-cert: {cert_path} is not a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise DeployError(
            f"--master-tls-key: {key_path} is not an unencrypted PEM private key"
        ) from None
    pub = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*pub) != key.public_key().public_bytes(*pub):
        raise DeployError("--master-tls-key does not match --master-tls-cert")
    return TlsMaterial(
        cert_pem=cert_pem,
        key_pem=key_pem,
        cert_file=Path(cert_path).resolve(),
        cert_name=_first_name(cert),
    )


def _first_name(cert: Any) -> str:

    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = names.get_values_for_type(x509.DNSName)
        if dns:
            return str(dns[0])
    except x509.ExtensionNotFound:
        pass
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else CERT_NAME


def cluster_dir(state_dir: Path, cloud: str, cluster_id: str) -> Path:
    return state_dir / "tls" / f"{cloud}-{cluster_id}"


def validity(cert_pem: str) -> tuple[dt.datetime, dt.datetime]:
    """(not before, not after) of a PEM certificate, in UTC."""

    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def renewal_reason(cert_pem: str, now: dt.datetime | None = None) -> str | None:
    """Why a generated certificate must be replaced at this ``up``, or None."""
    now = now or dt.datetime.now(dt.UTC)
    start, end = validity(cert_pem)
    if end - start > dt.timedelta(days=VALID_DAYS):
        days = (end - start).days
        return f"it is valid for {days} days, more than the {VALID_DAYS} macOS and iOS accept"
    left = end - now
    if left < dt.timedelta(days=RENEW_DAYS):
        when = end.strftime("%Y-%m-%d")
        return f"it expires on {when}" if left.total_seconds() > 0 else f"it expired on {when}"
    return None


def fingerprint(cert_pem: str) -> str:
    """The SHA-256 of the certificate (DER), hex."""

    der = x509.load_pem_x509_certificate(cert_pem.encode()).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def for_cluster(
    state_dir: Path, cloud: str, cluster_id: str, *, now: dt.datetime | None = None
) -> TlsMaterial:
    """The cluster's generated certificate: made on the first ``up`` (written by :func:`save`
    once ``up`` really starts), then re-used until :func:`renewal_reason` says it must go; then
    a new one (new key) that :func:`save` puts in its place."""
    directory = cluster_dir(state_dir, cloud, cluster_id)
    cert_file, key_file = directory / "master.crt", directory / "master.key"
    if cert_file.is_file() and key_file.is_file():
        cert_pem = cert_file.read_text()
        if renewal_reason(cert_pem, now) is None:
            return TlsMaterial(cert_pem, key_file.read_text(), cert_file)
    return dataclasses.replace(generate(now=now), cert_file=cert_file)


def save(material: TlsMaterial) -> Path | None:
    """Write a generated certificate and its key (0600) where ``cert_file`` says, unless they are
    there. A different certificate there (a renewal) is kept as ``master.crt.old`` (and its key
    ``master.key.old``) and its path returned; else None."""
    if material.cert_file is None:
        return None
    if material.cert_file.exists() and material.cert_file.read_text() == material.cert_pem:
        return None
    directory = material.cert_file.parent
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / "master.key"
    old: Path | None = None
    if material.cert_file.exists():
        old = material.cert_file.with_name(material.cert_file.name + ".old")
        os.replace(material.cert_file, old)
        if key_file.exists():
            os.replace(key_file, directory / "master.key.old")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(material.key_pem)
    material.cert_file.write_text(material.cert_pem)
    return old


def client_exports(master_url: str, cert_file: Path | None, cert_name: str = CERT_NAME) -> str:
    """The shell line that points Determined's and det's clients at the master."""
    line = f"export DET_MASTER={master_url}"
    if cert_file is not None:
        line += f" DET_MASTER_CERT_FILE={cert_file} DET_MASTER_CERT_NAME={cert_name}"
    return line


def verified_get(cert_file: Path, cert_name: str) -> Callable[..., requests.Response]:
    """``requests.get`` that trusts only ``cert_file`` and checks ``cert_name`` instead of the
    host in the URL (the master is reached by IP; its certificate names ``det-master``)."""

    class _NamedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            kwargs["assert_hostname"] = cert_name
            kwargs["server_hostname"] = cert_name
            super().init_poolmanager(*args, **kwargs)

    session = requests.Session()
    session.mount("https://", _NamedAdapter())

    def get(url: str, **kwargs: Any) -> requests.Response:
        # Per request: a session's ``verify`` loses to REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE in the
        # environment, which would then trust the public CAs instead of the cluster's cert.
        kwargs["verify"] = str(cert_file)
        return session.get(url, **kwargs)

    return get
