"""What ``--dry-run`` shows about each resource: its security-relevant settings (pure).

Inputs are the camelCase property maps Pulumi sends to the engine (see ``dryrun.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import NotRequired, TypedDict

from det.common.jsontypes import JSONObject, JSONValue
from det.deploy.common.dryrun import PropertyMap, PropertyValue, Rendered

# What one resource shows: JSON (``--dry-run --json`` prints it as it is).
Summary = JSONObject


def _get(i: JSONObject, *path: str, default: JSONValue = None) -> JSONValue:
    """The value at ``path`` in nested inputs, or ``default`` where a step is missing."""
    value: JSONValue = i
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return default
        value = value[key]
    return value


def _obj(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _objs(i: JSONObject, key: str) -> list[JSONObject]:
    """The mappings in list ``key`` (none when it is missing)."""
    value = i.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _joined(value: JSONValue, default: str = "") -> str:
    """A list as ``a,b``; a string as it is."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return default if value is None else str(value)


def _sg_rule(i: JSONObject) -> Summary:
    proto = i.get("ipProtocol", "?")
    ports = (
        "all"
        if proto == "-1" or i.get("fromPort") is None
        else f"{i.get('fromPort')}-{i.get('toPort')}"
    )
    source = i.get("cidrIpv4") or i.get("cidrIpv6") or f"sg:{i.get('referencedSecurityGroupId')}"
    return {"ingress": f"{'all' if proto == '-1' else proto}/{ports} from {source}"}


def _sg(i: JSONObject) -> Summary:
    egress: list[JSONValue] = [
        f"{e.get('protocol')} to {_joined(e.get('cidrBlocks'))}" for e in _objs(i, "egress")
    ]
    return {"egress": egress or "none"}


def _statements(policy: JSONValue) -> list[JSONValue]:
    doc = json.loads(policy) if isinstance(policy, str) else policy
    out: list[JSONValue] = []
    for s in _objs(_obj(doc), "Statement"):
        actions = _joined(s.get("Action"), "None")
        resources = _joined(s.get("Resource"), "None")
        cond = (
            " if " + json.dumps(s["Condition"], separators=(",", ":")) if s.get("Condition") else ""
        )
        out.append(f"{s.get('Effect')} {actions} on {resources}{cond}")
    return out


def _assumed_by(i: JSONObject) -> Summary:
    policy = _get(i, "assumeRolePolicy", default="{}")
    doc = json.loads(policy) if isinstance(policy, str) else policy
    return {"assumedBy": [s.get("Principal") for s in _objs(_obj(doc), "Statement")]}


def _rds(i: JSONObject) -> Summary:
    return {
        "publiclyAccessible": i.get("publiclyAccessible", False),
        "storageEncrypted": i.get("storageEncrypted", False),
        "engine": f"{i.get('engine')} {i.get('engineVersion', '')}".strip(),
    }


def _aurora(i: JSONObject) -> Summary:
    scaling = _obj(i.get("serverlessv2ScalingConfiguration"))
    return {
        "storageEncrypted": i.get("storageEncrypted", False),
        "engine": f"{i.get('engine')} {i.get('engineVersion', '')}".strip(),
        "capacity": f"{scaling.get('minCapacity')}-{scaling.get('maxCapacity')} ACU"
        if scaling
        else None,
    }


def _pab(i: JSONObject) -> Summary:
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    return {k: i.get(k, False) for k in keys}


def _sse(i: JSONObject) -> Summary:
    algo: list[JSONValue] = [
        _get(r, "applyServerSideEncryptionByDefault", "sseAlgorithm") for r in _objs(i, "rules")
    ]
    return {"encryption": algo or "none"}


def _ec2(i: JSONObject) -> Summary:
    return {
        "instanceProfile": i.get("iamInstanceProfile"),
        "imdsTokens": _get(i, "metadataOptions", "httpTokens", default="optional"),
        "rootVolumeEncrypted": _get(i, "rootBlockDevice", "encrypted", default=False),
        "securityGroups": i.get("vpcSecurityGroupIds"),
    }


def _firewall(i: JSONObject) -> Summary:
    allows: list[JSONValue] = [
        f"{a.get('protocol')}/{_joined(a.get('ports')) or 'all'}" for a in _objs(i, "allows")
    ]
    return {
        "direction": i.get("direction", "INGRESS"),
        "allow": allows,
        "from": i.get("sourceRanges") or i.get("sourceTags"),
        "to": i.get("targetTags", "all instances"),
    }


def _cloudsql(i: JSONObject) -> Summary:
    ip = _obj(_get(i, "settings", "ipConfiguration"))
    return {
        "publicIp": ip.get("ipv4Enabled", True),
        "privateNetwork": ip.get("privateNetwork"),
        "sslMode": ip.get("sslMode", "ALLOW_UNENCRYPTED_AND_ENCRYPTED"),
    }


def _gcs(i: JSONObject) -> Summary:
    return {
        "uniformBucketLevelAccess": i.get("uniformBucketLevelAccess", False),
        "publicAccessPrevention": i.get("publicAccessPrevention", "inherited"),
        "versioning": _get(i, "versioning", "enabled", default=False),
    }


def _gce(i: JSONObject) -> Summary:
    return {
        "serviceAccount": _get(i, "serviceAccount", "email"),
        "scopes": _get(i, "serviceAccount", "scopes"),
        "externalIp": any(n.get("accessConfigs") for n in _objs(i, "networkInterfaces")),
        "tags": i.get("tags"),
        "secureBoot": _get(i, "shieldedInstanceConfig", "enableSecureBoot", default=False),
    }


def _member(i: JSONObject) -> Summary:
    scope = i.get("bucket") or i.get("serviceAccountId") or i.get("secretId") or i.get("project")
    return {"role": i.get("role"), "member": i.get("member"), "on": scope}


def _routes(i: JSONObject) -> Summary:
    routes: list[JSONValue] = [
        f"{r.get('cidrBlock')} via {r.get('gatewayId')}" for r in _objs(i, "routes")
    ]
    return {"routes": routes or "local only"}


_BY_TYPE: dict[str, Callable[[JSONObject], Summary]] = {
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _sg_rule,
    "aws:ec2/securityGroup:SecurityGroup": _sg,
    "aws:iam/rolePolicy:RolePolicy": lambda i: {
        "statements": _statements(_get(i, "policy", default="{}"))
    },
    "aws:iam/role:Role": _assumed_by,
    "aws:iam/instanceProfile:InstanceProfile": lambda i: {"role": i.get("role")},
    "aws:rds/instance:Instance": _rds,
    "aws:rds/cluster:Cluster": _aurora,
    "aws:rds/clusterInstance:ClusterInstance": lambda i: {
        "publiclyAccessible": i.get("publiclyAccessible", False),
        "instanceClass": i.get("instanceClass"),
    },
    "aws:s3/bucket:Bucket": lambda i: {"forceDestroy": i.get("forceDestroy", False)},
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": _pab,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": _sse,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": lambda i: {
        "objectOwnership": _get(i, "rule", "objectOwnership")
    },
    "aws:s3/bucketVersioning:BucketVersioning": lambda i: {
        "versioning": _get(i, "versioningConfiguration", "status")
    },
    "aws:ec2/instance:Instance": _ec2,
    "aws:ec2/subnet:Subnet": lambda i: {
        "cidr": i.get("cidrBlock"),
        "publicIpOnLaunch": i.get("mapPublicIpOnLaunch", False),
    },
    "aws:ec2/routeTable:RouteTable": _routes,
    "aws:secretsmanager/secretVersion:SecretVersion": lambda i: {
        "secretString": i.get("secretString")
    },
    "gcp:compute/firewall:Firewall": _firewall,
    "gcp:sql/databaseInstance:DatabaseInstance": _cloudsql,
    "gcp:sql/user:User": lambda i: {"password": i.get("password")},
    "gcp:storage/bucket:Bucket": _gcs,
    "gcp:compute/instance:Instance": _gce,
    "gcp:projects/iAMMember:IAMMember": _member,
    "gcp:serviceaccount/iAMMember:IAMMember": _member,
    "gcp:storage/bucketIAMMember:BucketIAMMember": _member,
    "gcp:secretmanager/secretIamMember:SecretIamMember": _member,
    "gcp:projects/iAMCustomRole:IAMCustomRole": lambda i: {"permissions": i.get("permissions")},
    "gcp:secretmanager/secretVersion:SecretVersion": lambda i: {"secretData": i.get("secretData")},
}


def summarize(type_: str, inputs: JSONObject) -> Summary:
    fn = _BY_TYPE.get(type_)
    return fn(inputs) if fn else {}


class ResourceSummary(TypedDict):
    """One resource of ``--dry-run --json``: its type, its name, what it shows."""

    type: str
    name: str
    security: Summary


class DryRunDocument(TypedDict):
    """``--dry-run --json``: the cloud, the cluster, its resources and the program's outputs."""

    cloud: str
    clusterId: str
    resources: list[ResourceSummary]
    outputs: JSONObject
    #: The control plane's cost for each ``--master`` (``costs.to_json``).
    costEstimate: NotRequired[JSONObject]
    #: The quotas the cluster needs (``quotas.Need``, as dicts).
    quotaNeeds: NotRequired[list[JSONObject]]


def to_json(rendered: Rendered, cloud: str, cluster_id: str) -> DryRunDocument:
    return {
        "cloud": cloud,
        "clusterId": cluster_id,
        "resources": [
            {"type": r.type, "name": r.name, "security": summarize(r.type, _json(r.inputs))}
            for r in sorted(rendered.resources, key=lambda r: (r.name, r.type))
        ],
        "outputs": _json(rendered.outputs),
    }


def _json_value(value: PropertyValue) -> JSONValue:
    """A rendered value as JSON: an asset or archive (a file to upload) by its description."""
    if isinstance(value, dict):
        return _json(value)
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _json(values: PropertyMap) -> JSONObject:
    return {k: _json_value(v) for k, v in values.items()}


def _fmt(value: JSONValue) -> str:
    if isinstance(value, list):
        return "; ".join(_fmt(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def table(rows: Iterable[ResourceSummary]) -> str:
    """One line per setting; the type and name only on a resource's first line."""
    lines: list[tuple[str, str, str]] = []
    for row in rows:
        settings = []
        for key, value in row["security"].items():
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                settings += [f"{key}: {v}" if i == 0 else f"  {v}" for i, v in enumerate(value)]
            else:
                settings.append(f"{key}: {_fmt(value)}")
        for n, setting in enumerate(settings or [""]):
            lines.append((row["type"] if n == 0 else "", row["name"] if n == 0 else "", setting))
    header = ("TYPE", "NAME", "SECURITY-RELEVANT SETTINGS")
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header[:2])]
    out = [f"{header[0]:<{widths[0]}}  {header[1]:<{widths[1]}}  {header[2]}"]
    out += [f"{t:<{widths[0]}}  {n:<{widths[1]}}  {s}".rstrip() for t, n, s in lines]
    return "\n".join(out)
