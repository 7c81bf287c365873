"""The ``up`` and ``down`` flows every cloud runs; each cloud passes in only what differs.

``up``: dry-run (offline render) or pulumi check → cloud preflight → password → the expensive
local steps (det's wheel) → Automation API ``up`` → wait for the master. ``down``: pulumi check
→ the stack (none: nothing to do, so a second ``down`` is a no-op) → confirm → the cloud stops
the master and removes the agents the master started (Pulumi does not know them) and, when
asked, empties the bucket → Automation API ``destroy``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

import pulumi

from det.common.jsontypes import JSONObject
from det.deploy.common import (
    automation,
    commands,
    costs,
    dryrun,
    gc_image,
    mirror,
    outs,
    preflight,
    quotas,
    registry,
    rollout,
    serverless,
    tls,
)
from det.deploy.common.preflight import check_pulumi_cli

# program.build(initial_user_password, registry_password, registry_auth) → the stack's outputs;
# None renders without that password (the dry-run); registry_auth is the flags' registry, else
# the one the stack config recorded at an earlier ``up``.
Build = Callable[
    [pulumi.Input[str] | None, pulumi.Input[str] | None, "registry.RegistryAuth | None"],
    dryrun.ProgramOutputs,
]


@dataclass(frozen=True)
class UpPlan:
    cloud: str
    """``aws`` or ``gcp``: names the dry-run's project and summary."""
    project: str
    """The Pulumi project."""
    cluster_id: str
    build: Build
    mock_calls: Mapping[str, dryrun.MockCall]
    stack_config: Mapping[str, tuple[str, bool]]
    """Pulumi config (key → (value, secret)) besides the initial password."""
    target: str
    """Where the cluster goes, as shown in "Deploying cluster … to <target>"."""
    preflight: Callable[[bool], str | None]
    """Check credentials (and the quota when passed True); raise, or return a warning."""
    cert: tls.TlsMaterial | None = None
    """The master's certificate (None: plain HTTP): ``up`` prints where it is saved."""
    registry_password: str | None = None
    """A private registry's password, stored as the secret stack config ``det:registryPassword``
    (None: keep what the stack has)."""
    registry: registry.RegistryAuth | None = None
    """The ``--registry-server``/``--registry-username`` flags, stored as stack config (None:
    keep what the stack has)."""
    remove_config: tuple[str, ...] = ()
    """Stack config keys to remove before the update (``--no-registry``)."""
    prepare: Callable[[], None] = lambda: None
    """The slow local steps, run once every check has passed (building det's wheel)."""
    estimates: tuple[costs.Estimate, ...] = ()
    """The control plane's cost for each ``--master`` (printed by the dry-run)."""
    quota_needs: tuple[quotas.Need, ...] = ()
    """What the cluster needs of the account's quotas at its largest (shown by the dry-run)."""
    master: str = "vm"
    """``vm`` or ``serverless``: the control plane being deployed."""
    serverless: rollout.Steps | None = None
    """A serverless master's rollout: two passes around the image push and the migration."""
    gc_image: str | None = None
    """``--checkpoint-gc-image``: named before the run (``common.gc_image``)."""
    mirror_login: Callable[[], rollout.Login] | None = None
    """With ``--mirror-images``: the login to the cluster's registry, into which a real ``up``
    copies the task images once the stack is up."""
    replace_stale: Callable[[], None] | None = None
    """For an existing cluster: replace the agents an earlier ``up`` started with an older
    config, once the stack is up."""


def require_local(
    args: argparse.Namespace,
    previous: JSONObject | None,
    credentials: Callable[[], str | None],
) -> None:
    """What this machine lacks for this ``up``, listed together before any cloud call
    (``common.preflight``). The stack's outputs (``previous``; None for a new cluster) tell an
    existing cluster's master kind, and so whether Docker must build the master image."""
    kind = serverless.master_kind(getattr(args, "master", None), previous)
    preflight.require_local(
        docker_for=preflight.docker_needs(
            kind == serverless.SERVERLESS, bool(getattr(args, "mirror_images", False))
        ),
        master_image=kind == serverless.SERVERLESS,
        credentials=credentials,
    )


def up(plan: UpPlan, args: argparse.Namespace, out: TextIO) -> int:
    """The whole ``up``: the run (:func:`run_up`), then, when it deployed (not a dry-run), the
    image copy and the stale agents' replacement."""
    if not getattr(args, "json", False):
        gc_image.report(plan.gc_image, out)
    code = run_up(plan, args, out)
    if code != 0 or args.dry_run:
        return code
    if plan.mirror_login is not None:
        pairs = outs.text_mapping(
            automation.outputs(plan.project, plan.cluster_id), "mirror_images"
        )
        mirror.copy_images(pairs.items(), plan.mirror_login(), out)
    if plan.replace_stale is not None:
        plan.replace_stale()
    return code


def run_up(plan: UpPlan, args: argparse.Namespace, out: TextIO) -> int:
    if args.dry_run:
        return commands.print_dry_run(
            plan.cloud,
            plan.cluster_id,
            lambda: plan.build(None, None, plan.registry),
            plan.mock_calls,
            args.json,
            out,
            estimates=plan.estimates,
            master=plan.master,
            quota_needs=plan.quota_needs,
        )
    check_pulumi_cli()
    warning = plan.preflight(not args.no_preflight_checks)
    if warning:
        out.write(f"warning: {warning}\n")
    new = not automation.has_stack(plan.project, plan.cluster_id)
    password = commands.initial_password(args.initial_user_password, new, args.yes)
    plan.prepare()
    config = dict(plan.stack_config)
    if password:
        config["det:initialUserPassword"] = (password, True)
    if plan.registry_password:
        config[f"det:{registry.STACK_CONFIG_KEY}"] = (plan.registry_password, True)
    config.update(registry.stack_config(plan.registry))

    def pulumi_program() -> None:

        stack_config = pulumi.Config("det")
        given = stack_config.get_secret("initialUserPassword")
        registry_password = stack_config.get_secret(registry.STACK_CONFIG_KEY)
        auth = plan.registry or registry.from_stack_config(stack_config.get)
        for key, value in plan.build(given, registry_password, auth).items():
            pulumi.export(key, value)

    if plan.cert:
        old = tls.save(plan.cert)
        if old is not None:
            _, until = tls.validity(plan.cert.cert_pem)
            out.write(
                f"The master's certificate is renewed ({tls.renewal_reason(old.read_text())}): "
                f"the new one is valid until {until:%Y-%m-%d}, saved as {plan.cert.cert_file} "
                f"(the old one: {old}). The master restarts with it and the agents that trust "
                "the old one are replaced.\n"
            )
    out.write(f"Deploying cluster {plan.cluster_id!r} to {plan.target}...\n")

    def apply() -> JSONObject:
        return automation.up(
            plan.project,
            plan.cluster_id,
            pulumi_program,
            config,
            on_output=commands.lines(out),
            remove=plan.remove_config,
        )

    if plan.serverless is not None:
        running = None if new else automation.outputs(plan.project, plan.cluster_id)
        outputs = rollout.run(plan.serverless, outs.text(running, "master_image"), apply, out)
    else:
        outputs = apply()
    return commands.finish_up(
        outputs,
        not args.no_wait_for_master,
        args.master_timeout,
        new and not password,
        out,
        cert=plan.cert,
        status_command=f"det deploy {plan.cloud} status --cluster-id {plan.cluster_id}",
    )


def stale_agents(
    project: str,
    cluster_id: str,
    previous: JSONObject,
    args: argparse.Namespace,
    replace: Callable[[JSONObject, str], Sequence[str]],
    removed: str,
    out: TextIO,
) -> Callable[[], None]:
    """``UpPlan.replace_stale`` for an existing cluster (``previous``: its outputs before this
    ``up``): once the stack is up, ``replace(outputs, new digest)`` removes the agents started
    for an older master config (``commands.replace_stale_agents``; ``removed`` says what the
    cloud did to them), unless ``--keep-agents``."""

    def replace_stale() -> None:
        outputs = automation.outputs(project, cluster_id)
        commands.replace_stale_agents(
            outputs,
            previous,
            getattr(args, "keep_agents", False),
            lambda digest: replace(outputs, digest),
            removed,
            out,
        )

    return replace_stale


@dataclass(frozen=True)
class Teardown:
    """What ``down`` does in one cloud, bound to its credentials and the stack's outputs."""

    remove_instances: Callable[[], str]
    """Stop the master and remove the agents; returns the line to print (how many went)."""
    delete_bucket: Callable[[str], int]
    """Empty and delete the bucket; returns the number of objects removed."""


def down(
    cloud: str,
    project: str,
    args: argparse.Namespace,
    out: TextIO,
    connect: Callable[[JSONObject], Teardown],
) -> int:
    """``connect(outputs)`` checks credentials and returns the cloud's teardown steps."""
    check_pulumi_cli()
    if not automation.has_stack(project, args.cluster_id):
        # Nothing left to delete (a second `down`, or a name that was never deployed).
        out.write(
            f"No {cloud.upper()} cluster {args.cluster_id!r}: nothing to delete "
            f"(see `det deploy {cloud} list`).\n"
        )
        return 0
    question = (
        f"Delete cluster {args.cluster_id!r}: its master, agents, database and network"
        f"{' and the checkpoint bucket' if args.delete_bucket else ''}?"
    )
    if not commands.confirm(question, args.yes):
        out.write("Delete cancelled.\n")
        return 0
    outputs = automation.outputs(project, args.cluster_id)
    teardown = connect(outputs)
    out.write(teardown.remove_instances() + "\n")
    bucket = outs.text(outputs, "bucket")
    if args.delete_bucket and bucket:
        count = teardown.delete_bucket(bucket)
        out.write(f"Deleted bucket {bucket} ({count} objects).\n")
    automation.destroy(project, args.cluster_id, on_output=commands.lines(out))
    if bucket and not args.delete_bucket:
        out.write(f"Kept checkpoint bucket {bucket} (remove it with `down --delete-bucket`).\n")
    out.write("Delete successful.\n")
    return 0
