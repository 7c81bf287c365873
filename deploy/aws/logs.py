"""The cluster's CloudWatch Logs group: the master's and agents' boot logs.

The machines' roles may only create streams in and write to this group
(``iam.log_statements``); the group is deleted with the stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws


@dataclasses.dataclass
class BootLogsArgs:
    name: str
    retention_days: int
    tags: Mapping[str, str]


class BootLogs(pulumi.ComponentResource):
    name: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(self, name: str, args: BootLogsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:aws:BootLogs", name, None, opts)
        group = aws.cloudwatch.LogGroup(
            name,
            name=args.name,
            retention_in_days=args.retention_days,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.name = group.name
        self.arn = group.arn
        self.register_outputs({"name": group.name, "arn": group.arn})
