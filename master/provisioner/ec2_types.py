"""The shapes of the EC2 API calls the AWS provider makes, as boto3 takes and returns them.

Only the fields det sends or reads are declared; EC2 answers with more, which stay unread. boto3
itself is untyped: :class:`EC2Client` is the part of its EC2 client the provider uses (tests
hand in their own).
"""

from __future__ import annotations

import datetime as dt
from typing import NotRequired, Protocol

from typing_extensions import TypedDict, Unpack


class Tag(TypedDict):
    Key: str
    Value: str


class TagSpecification(TypedDict):
    ResourceType: str
    Tags: list[Tag]


class Ebs(TypedDict):
    VolumeSize: int
    VolumeType: NotRequired[str]
    DeleteOnTermination: NotRequired[bool]


class BlockDeviceMapping(TypedDict):
    DeviceName: str
    Ebs: NotRequired[Ebs]


class MetadataOptions(TypedDict):
    HttpTokens: str
    HttpEndpoint: str
    HttpPutResponseHopLimit: int


class NetworkInterface(TypedDict):
    DeviceIndex: int
    SubnetId: str
    AssociatePublicIpAddress: bool
    DeleteOnTermination: bool
    Groups: NotRequired[list[str]]


class SpotOptions(TypedDict):
    SpotInstanceType: str
    InstanceInterruptionBehavior: str
    MaxPrice: NotRequired[str]


class InstanceMarketOptions(TypedDict):
    MarketType: str
    SpotOptions: SpotOptions


class Arn(TypedDict):
    Arn: str


class Placement(TypedDict, total=False):
    AvailabilityZone: str


class RunInstancesRequest(TypedDict):
    """``RunInstances``'s keyword arguments as det builds them."""

    ImageId: str
    InstanceType: str
    MinCount: int
    MaxCount: int
    UserData: str
    ClientToken: str
    TagSpecifications: list[TagSpecification]
    BlockDeviceMappings: list[BlockDeviceMapping]
    MetadataOptions: MetadataOptions
    InstanceInitiatedShutdownBehavior: str
    IamInstanceProfile: NotRequired[Arn]
    KeyName: NotRequired[str]
    NetworkInterfaces: NotRequired[list[NetworkInterface]]
    Placement: NotRequired[Placement]
    SecurityGroupIds: NotRequired[list[str]]
    InstanceMarketOptions: NotRequired[InstanceMarketOptions]


class Filter(TypedDict):
    Name: str
    Values: list[str]


class InstanceStateName(TypedDict, total=False):
    Name: str


class Instance(TypedDict, total=False):
    """One instance of ``DescribeInstances`` / ``RunInstances`` (the fields det reads)."""

    InstanceId: str
    State: InstanceStateName
    LaunchTime: dt.datetime
    InstanceType: str
    SubnetId: str
    Placement: Placement
    PrivateIpAddress: str
    Tags: list[Tag]
    InstanceLifecycle: str


class Reservation(TypedDict, total=False):
    Instances: list[Instance]


class DescribeInstancesResult(TypedDict, total=False):
    Reservations: list[Reservation]
    NextToken: str


class RunInstancesResult(TypedDict, total=False):
    Instances: list[Instance]


class Image(TypedDict, total=False):
    RootDeviceName: str
    BlockDeviceMappings: list[BlockDeviceMapping]


class DescribeImagesResult(TypedDict):
    Images: list[Image]


class SpotInstanceRequest(TypedDict, total=False):
    SpotInstanceRequestId: str
    InstanceId: str
    State: str


class DescribeSpotInstanceRequestsResult(TypedDict, total=False):
    SpotInstanceRequests: list[SpotInstanceRequest]


class EC2Client(Protocol):
    """The calls of boto3's EC2 client the provider makes (keyword arguments, as boto3 takes)."""

    def describe_images(self, *, ImageIds: list[str]) -> DescribeImagesResult: ...

    def run_instances(self, **request: Unpack[RunInstancesRequest]) -> RunInstancesResult: ...

    def describe_instances(
        self, *, Filters: list[Filter], MaxResults: int, NextToken: str = ...
    ) -> DescribeInstancesResult: ...

    def terminate_instances(self, *, InstanceIds: list[str]) -> object: ...

    def describe_spot_instance_requests(
        self, *, Filters: list[Filter]
    ) -> DescribeSpotInstanceRequestsResult: ...

    def cancel_spot_instance_requests(self, *, SpotInstanceRequestIds: list[str]) -> object: ...
