"""Render a Pulumi program offline with Pulumi's mocks: no cloud credentials, no Pulumi CLI.

:func:`render` runs the program in-process under ``pulumi.runtime.set_mocks`` and records every
resource the engine would create, with the inputs it would send, plus the program's outputs.
The mocks answer with the inputs echoed back and plausible values for computed attributes
(ids, ARNs, addresses), so later resources that depend on them can be built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeAlias

import pulumi
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await
from typing_extensions import TypeAliasType

from det.common.jsontypes import JSONObject, JSONScalar

SECRET = "(secret)"
# Pulumi's wire marker for secret values (rpc._special_sig_key / _special_secret_sig).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG_KEY = _SIG_KEY
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"

# A resource's input as the engine gets it: JSON, or a Pulumi asset or archive (a file a bucket
# object uploads: the boot tests read its path).
PropertyValue = TypeAliasType(
    "PropertyValue",
    "JSONScalar | pulumi.Asset | pulumi.Archive | list[PropertyValue] | dict[str, PropertyValue]",
)
PropertyMap: TypeAlias = dict[str, PropertyValue]
# A provider function's mock (``program.MOCK_CALLS``): its arguments in, its result out.
MockCall = Callable[[JSONObject], JSONObject]
# What a program body returns: its stack outputs.
ProgramOutputs = Mapping[str, pulumi.Output[object]]


@dataclasses.dataclass(frozen=True)
class RecordedResource:
    type: str
    name: str
    inputs: PropertyMap


@dataclasses.dataclass(frozen=True)
class Rendered:
    resources: tuple[RecordedResource, ...]
    outputs: PropertyMap
    calls: tuple[str, ...]

    def of_type(self, type_: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_]


def _unwrap(value: PropertyValue) -> PropertyValue:
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return SECRET
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _unwrap_map(values: PropertyMap) -> PropertyMap:
    return {k: _unwrap(v) for k, v in values.items()}


def _list(value: PropertyValue) -> list[PropertyValue]:
    return value if isinstance(value, list) else []


def _computed(type_: str, name: str, inputs: PropertyMap) -> PropertyMap:
    """Values the cloud would fill in, by resource type (only what our programs read)."""
    service = type_.split(":")[1].split("/")[0] if ":" in type_ else "x"
    out: PropertyMap = {"arn": f"arn:aws:{service}:us-west-2:123456789012:{name}"}
    if type_.startswith("random:"):
        out["result"] = SECRET if "Password" in type_ else "a1b2c3"
        out["hex"] = "a1b2c3"
    elif type_ == "aws:rds/instance:Instance":
        out |= {"address": f"{name}.abc.us-west-2.rds.amazonaws.com", "port": 5432}
    elif type_ == "aws:ec2/eip:Eip":
        out |= {"publicIp": "203.0.113.10", "publicDns": "ec2-203-0-113-10.compute.amazonaws.com"}
    elif type_ == "aws:ec2/instance:Instance":
        out |= {"privateIp": "10.0.0.10", "publicIp": "203.0.113.10"}
    elif type_ == "aws:lb/loadBalancer:LoadBalancer":
        out |= {
            "dnsName": f"{name}-1234567890.us-west-2.elb.amazonaws.com",
            "arnSuffix": f"app/{name}/50dc6c495c0c9188",
        }
    elif type_ == "aws:cloudfront/distribution:Distribution":
        # Each distribution has a name of its own (the task origin's is a second one).
        out["domainName"] = (
            "d222222abcdef8.cloudfront.net"
            if name.endswith("-tasks")
            else "d111111abcdef8.cloudfront.net"
        )
    elif type_ == "aws:ecr/repository:Repository":
        out["repositoryUrl"] = (
            f"123456789012.dkr.ecr.us-west-2.amazonaws.com/{inputs.get('name', name)}"
        )
    elif type_ == "aws:rds/cluster:Cluster":
        out |= {"endpoint": f"{name}.cluster-abc.us-west-2.rds.amazonaws.com", "port": 5432}
    elif type_ == "aws:acm/certificate:Certificate":
        domain = inputs.get("domainName", "example.com")
        out["domainValidationOptions"] = [
            {
                "domainName": d,
                "resourceRecordName": f"_x1.{d}.",
                "resourceRecordType": "CNAME",
                "resourceRecordValue": "_x2.acm-validations.aws.",
            }
            for d in [domain, *_list(inputs.get("subjectAlternativeNames", []))]
        ]
    elif type_ == "aws:s3/bucket:Bucket":
        out["bucket"] = inputs.get("bucket") or f"{name}-1234567"
    elif type_ == "gcp:serviceaccount/account:Account":
        account = inputs.get("accountId", name)
        project = inputs.get("project", "project")
        out |= {
            "email": f"{account}@{project}.iam.gserviceaccount.com",
            "name": f"projects/{project}/serviceAccounts/{account}",
        }
    elif type_ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        out["name"] = f"projects/{inputs.get('project', 'project')}/roles/{inputs.get('roleId')}"
    elif type_ == "gcp:compute/address:Address":
        out["address"] = "203.0.113.20"
    elif type_ == "gcp:sql/databaseInstance:DatabaseInstance":
        out |= {"privateIpAddress": "10.200.0.3", "connectionName": f"project:region:{name}"}
    elif type_ == "gcp:filestore/instance:Instance":
        out["networks"] = [
            {**n, "ipAddresses": ["10.201.0.2"]}
            for n in _list(inputs.get("networks", []))
            if isinstance(n, dict)
        ]
    elif type_.startswith("gcp:"):
        out["selfLink"] = f"https://www.googleapis.com/compute/v1/projects/project/{name}"
    return out


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(
        self,
        call_results: Mapping[str, MockCall],
        overrides: Mapping[str, PropertyMap] | None = None,
    ):
        self.call_results = call_results
        self.overrides = overrides or {}
        self.resources: list[RecordedResource] = []
        self.calls: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, PropertyMap]:
        inputs = _unwrap_map(args.inputs)
        self.resources.append(RecordedResource(args.typ, args.name, inputs))
        state: PropertyMap = dict(args.inputs)
        state.update(_computed(args.typ, args.name, inputs))
        state.update(self.overrides.get(args.typ, {}))
        if "name" not in state:
            state["name"] = args.name
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> JSONObject:  # type: ignore[override]
        self.calls.append(args.token)
        answer = self.call_results.get(args.token)
        return answer(dict(args.args)) if answer else {}


def render(
    program: Callable[[], ProgramOutputs],
    call_results: Mapping[str, MockCall] | None = None,
    *,
    project: str = "det",
    stack: str = "dry-run",
    overrides: Mapping[str, PropertyMap] | None = None,
) -> Rendered:
    """Run ``program`` (returns its outputs) under mocks; return what it would create.
    ``overrides`` (resource type → attributes) replace the mocks' computed values, e.g. to
    point a rendered boot script at local stand-ins of the cloud (tests)."""
    mocks = RecordingMocks(call_results or {}, overrides)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    outputs: PropertyMap = {}

    def body() -> pulumi.Output[None]:
        returned = program()
        return pulumi.Output.all(**returned).apply(outputs.update)

    _sync_await(run_pulumi_func(lambda: _sync_await(pulumi.Output.from_input(body()).future())))
    return Rendered(tuple(mocks.resources), _unwrap_map(outputs), tuple(mocks.calls))
