"""The generated master certificate: at most 825 days, renewed by `up` 30 days before it ends
(or at once when an older det made it for longer), and the renewal reaches the master and the
agents through the config hash (Pulumi mocks)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest
from conftest import AWS, GCP

from det.deploy.aws import program as aws_program
from det.deploy.common import boot, dryrun, status, tls
from det.deploy.gcp import program as gcp_program

NOW = dt.datetime(2027, 3, 1, 12, 0, tzinfo=dt.UTC)


def _legacy_ten_year_certificate() -> tls.TlsMaterial:
    """What det made before: the same certificate, valid for 3650 days."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, tls.CERT_NAME)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=10))
        .not_valid_after(NOW + dt.timedelta(days=3640))
        .sign(key, hashes.SHA256())
    )
    return tls.TlsMaterial(
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )


def test_a_generated_certificate_lives_825_days_at_most() -> None:
    start, end = tls.validity(tls.generate(now=NOW).cert_pem)
    assert end - start == dt.timedelta(days=825)  # Apple's limit, counted from notBefore
    assert start <= NOW <= end
    assert tls.renewal_reason(tls.generate(now=NOW).cert_pem, NOW) is None


def test_up_renews_the_saved_certificate_30_days_before_it_ends(tmp_path: Path) -> None:
    first = tls.for_cluster(tmp_path, "aws", "c1", now=NOW)
    assert tls.save(first) is None  # the first one: nothing replaced
    _, end = tls.validity(first.cert_pem)
    # Until 30 days before the end the same certificate and key are used ...
    kept = tls.for_cluster(tmp_path, "aws", "c1", now=end - dt.timedelta(days=31))
    assert (kept.cert_pem, kept.key_pem) == (first.cert_pem, first.key_pem)
    assert tls.save(kept) is None
    # ... then a new one (new key), which replaces the saved pair; the old pair is kept.
    late = end - dt.timedelta(days=29)
    assert tls.renewal_reason(first.cert_pem, late) == f"it expires on {end:%Y-%m-%d}"
    renewed = tls.for_cluster(tmp_path, "aws", "c1", now=late)
    assert renewed.cert_file == first.cert_file
    assert renewed.key_pem != first.key_pem and renewed.cert_pem != first.cert_pem
    old = tls.save(renewed)
    assert old is not None and old.read_text() == first.cert_pem
    assert first.cert_file is not None and first.cert_file.read_text() == renewed.cert_pem
    key_file = first.cert_file.parent / "master.key"
    assert key_file.read_text() == renewed.key_pem and key_file.stat().st_mode & 0o777 == 0o600
    assert (first.cert_file.parent / "master.key.old").read_text() == first.key_pem
    assert tls.validity(renewed.cert_pem)[1] - late > dt.timedelta(days=820)


def test_a_ten_year_certificate_of_an_older_det_is_renewed_at_the_next_up(tmp_path: Path) -> None:
    legacy = _legacy_ten_year_certificate()
    directory = tls.cluster_dir(tmp_path, "gcp", "c1")
    directory.mkdir(parents=True)
    (directory / "master.crt").write_text(legacy.cert_pem)
    (directory / "master.key").write_text(legacy.key_pem)
    reason = tls.renewal_reason(legacy.cert_pem, NOW)
    assert reason == "it is valid for 3650 days, more than the 825 macOS and iOS accept"
    renewed = tls.for_cluster(tmp_path, "gcp", "c1", now=NOW)
    assert renewed.cert_pem != legacy.cert_pem
    start, end = tls.validity(renewed.cert_pem)
    assert end - start == dt.timedelta(days=825)


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_a_renewed_certificate_changes_the_agents_config_hash_and_the_masters_boot(
    cloud: str,
) -> None:
    # The hash is in master.yaml (the agents' tag or label) and so in the master's user data /
    # startup script: a new certificate restarts (AWS) or replaces (GCP) the master, and `up`
    # replaces the agents that trust only the old one.
    if cloud == "aws":
        cfg, build, calls = AWS, aws_program.build, aws_program.MOCK_CALLS
    else:
        cfg, build, calls = GCP, gcp_program.build, gcp_program.MOCK_CALLS  # type: ignore[assignment]
    graphs = []
    for material in (tls.generate(now=NOW), tls.generate(now=NOW)):
        with_cert = dataclasses.replace(
            cfg, boot=dataclasses.replace(boot.BootOptions(), tls=material)
        )
        graphs.append(dryrun.render(lambda c=with_cert: build(c), calls))  # type: ignore[misc]
    first, second = graphs
    assert first.outputs["config_hash"] != second.outputs["config_hash"]
    assert first.outputs["master_yaml"] != second.outputs["master_yaml"]
    same = dryrun.render(
        lambda: build(
            dataclasses.replace(cfg, boot=dataclasses.replace(boot.BootOptions(), tls=material))
        ),  # type: ignore[misc]
        calls,
    )
    assert same.outputs["config_hash"] == second.outputs["config_hash"]


def test_status_says_when_up_will_renew_the_certificate(tmp_path: Path) -> None:
    cert = tmp_path / "master.crt"
    cert.write_text(tls.generate(now=dt.datetime.now(dt.UTC) - dt.timedelta(days=800)).cert_pem)
    line = status._certificate(cert, "aws", "c1")
    assert (
        line.startswith("it expires on ")
        and "`det deploy aws up --cluster-id c1` renews it" in line
    )
    cert.write_text(tls.generate().cert_pem)
    assert status._certificate(cert, "aws", "c1").startswith("valid until ")
