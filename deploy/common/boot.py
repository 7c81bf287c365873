"""What a cluster's VMs need at boot besides master.yaml: which det to install and how, and the
master's TLS material. Resolved once from the ``up`` flags (:func:`from_args`) and carried in the
cloud's config (``boot``), so the Pulumi program stays a pure function of its config.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

from det.deploy.common import release, state, tls
from det.deploy.common.errors import DeployError
from det.deploy.common.release import Release
from det.deploy.common.tls import TlsMaterial
from det.master.provisioner import bootstrap
from det.master.provisioner.config import AgentInstall


@dataclasses.dataclass(frozen=True)
class BootOptions:
    release: Release | None = None
    """The wheel uploaded into the bucket; None: a placeholder (dry-run, or not built yet)."""
    build_release: bool = False
    """``up`` builds the wheel (:func:`with_release`) once every cheap check has passed."""
    wheel_url: str | None = None
    """``--det-wheel-url``: the organisation's own wheel (s3://, gs:// or https://); nothing is
    uploaded then."""
    wheel_sha256: str | None = None
    package_index: str | None = None
    """``--det-package-index``: where the VMs' pip finds det's dependencies."""
    tls: TlsMaterial | None = None
    """None with ``plain_http`` False: a throwaway certificate is generated (dry-run, tests)."""
    plain_http: bool = False

    @property
    def uploads(self) -> Release | None:
        """The release to put into the bucket (None when ``--det-wheel-url`` is used)."""
        if self.wheel_url:
            return None
        return self.release or release.placeholder()

    def tls_material(self) -> TlsMaterial | None:
        if self.plain_http:
            return None
        return self.tls or _throwaway()

    @property
    def scheme(self) -> str:
        return "http" if self.plain_http else "https"

    def default_port(self) -> int:
        return tls.PLAIN_PORT if self.plain_http else tls.TLS_PORT


@functools.lru_cache(maxsize=1)
def _throwaway() -> TlsMaterial:
    return tls.generate()


def wheel_location(opts: BootOptions, scheme: str, bucket: str) -> tuple[str, str, str | None]:
    """(wheel URL, sha256 or "", constraints URL or None) the VMs download with their role;
    ``scheme`` is ``s3`` or ``gs``."""
    if opts.wheel_url:
        return opts.wheel_url, opts.wheel_sha256 or "", None
    rel = opts.uploads
    assert rel is not None
    return (
        f"{scheme}://{bucket}/{rel.wheel_key}",
        rel.sha256,
        f"{scheme}://{bucket}/{rel.constraints_key}",
    )


def from_args(args: argparse.Namespace, cloud: str, cluster_id: str) -> BootOptions:
    """Resolve the ``up`` flags: load or make the certificate (a dry-run saves nothing). The
    wheel is not built here: building it is the slowest local step and can fail on its own, so
    ``up`` does it after the checks (Pulumi CLI, credentials, quotas), in :func:`with_release`."""
    wheel_url = getattr(args, "det_wheel_url", None)
    sha = getattr(args, "det_wheel_sha256", None)
    if wheel_url and not wheel_url.startswith(("s3://", "gs://", "https://", "http://")):
        raise DeployError(f"--det-wheel-url: {wheel_url!r} is not an s3://, gs:// or https:// URL")
    if sha and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha.lower())):
        raise DeployError("--det-wheel-sha256: expected 64 hexadecimal digits")
    plain = bool(getattr(args, "no_tls", False))
    cert, key = getattr(args, "master_tls_cert", None), getattr(args, "master_tls_key", None)
    if bool(cert) != bool(key):
        raise DeployError("--master-tls-cert and --master-tls-key go together")
    if plain and cert:
        raise DeployError("--no-tls cannot be combined with --master-tls-cert")
    material: TlsMaterial | None = None
    if cert and key:
        material = tls.load(cert, key)
    elif not plain and not args.dry_run:
        material = tls.for_cluster(state.state_dir(), cloud, cluster_id)
    return BootOptions(
        build_release=not wheel_url and not args.dry_run,
        wheel_url=wheel_url,
        wheel_sha256=sha,
        package_index=getattr(args, "det_package_index", None),
        tls=material,
        plain_http=plain,
    )


def with_release(opts: BootOptions) -> BootOptions:
    """``opts`` with det's wheel built, when ``up`` ships one (else ``opts`` as it is)."""
    if not opts.build_release or opts.release is not None:
        return opts
    return dataclasses.replace(
        opts, release=release.for_vms(release.build(), index_url=opts.package_index)
    )


def cert_path_line(opts: BootOptions) -> Path | None:
    material = opts.tls_material()
    return material.cert_file if material else None


def agent_install(
    opts: BootOptions, scheme: str, bucket: str, extras: str, log_target: str | None = None
) -> dict[str, str]:
    """The master.yaml provider key ``agent_install``: the agents fetch the same wheel and ship
    their boot and agent logs to ``log_target`` (the master's log group / log)."""
    wheel, sha, constraints = wheel_location(opts, scheme, bucket)
    out = {"wheel_url": wheel, "wheel_sha256": sha, "extras": extras}
    if log_target:
        out["log_target"] = log_target
    if constraints:
        out["constraints_url"] = constraints
    if opts.package_index:
        out["package_index"] = opts.package_index
    return out


def check_agent_user_data(opts: BootOptions, scheme: str, extras: str, port: int) -> int:
    """The size of an agent's user data (the master renders it at each launch with its own
    certificate, ``bootstrap.render_user_data``) with the longest values the cluster can give it.
    A :class:`DeployError` now, before anything is created, when it would be over the cloud's
    limit (``scheme`` s3: EC2's 16 KiB; gs: a GCE metadata value's 256 KiB): the master would
    otherwise fail every launch (a certificate chain is the usual cause on AWS)."""

    # The longest log target: AWS /det/<cluster id of up to 32 characters>.
    install = agent_install(opts, scheme, "b" * 63, extras, "/det/" + "c" * 32)
    material = opts.tls_material()
    env = bootstrap.install_env(
        AgentInstall(**install),
        material.cert_pem if material else None,
        material.cert_name if material else None,
    )
    try:
        text = bootstrap.render_user_data(
            f"https://255.255.255.255:{port}",
            "f" * 64,  # the master's agent token: 32 bytes in hex
            "compute-pool",
            "00000000-0000-0000-0000-000000000000",  # the master's cluster id: a UUID
            "gcp" if scheme == "gs" else "aws",
            env,
            # The longest pool startup_script a deploy writes (GCP's Filestore mount).
            startup_script="apt-get install -y nfs-common && mkdir -p /mnt/det-shared && "
            "mount 255.255.255.255:/det /mnt/det-shared",
        )
    except ValueError as e:
        where = (
            f" (--master-tls-cert is {len(material.cert_pem)} bytes of PEM, which the agents' "
            "user data carries: use a shorter certificate, e.g. ECDSA as the generated one)"
            if material
            else ""
        )
        raise DeployError(f"agents could not be launched: their {e}{where}") from None
    return len(text.encode())
