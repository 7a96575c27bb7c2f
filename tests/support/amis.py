"""AMIs published by Amazon in moto's EC2, for the AMI lookup and `trn doctor` tests.

moto answers DescribeImages with its own filter logic (owners, name and description wildcards); it
loads Amazon's public AMIs from its data files but no Neuron DLAMI, so a test publishes the ones it
needs here, as Amazon would: owner alias ``amazon``, public, with a creation date.
"""

from __future__ import annotations

import datetime as dt
import itertools

from moto.ec2.models import ec2_backends
from moto.ec2.models.amis import Ami

from tests.support.cli_support import ACCOUNT

# The account that owns the DLAMIs (an "amazon" alias account; the value does not matter to the lookup).
DLAMI_OWNER = "898082745236"
_IDS = itertools.count(0x0A1B2C3D4E5F60000)


def publish_ami(region: str, name: str, description: str, created: dt.datetime, *, owner_alias: str | None = "amazon",
                architecture: str = "x86_64") -> str:
    """Register an AMI in moto's ``region`` as its owner would publish it; its id."""
    backend = ec2_backends[ACCOUNT][region]
    ami_id = f"ami-{next(_IDS):017x}"
    backend.amis[ami_id] = Ami(
        backend, ami_id, name=name, description=description, owner_id=DLAMI_OWNER if owner_alias else ACCOUNT,
        owner_alias=owner_alias, public=owner_alias is not None, architecture=architecture,
        virtualization_type="hvm", creation_date=created, root_device_type="ebs", root_device_name="/dev/sda1",
        region_name=region,
    )
    return ami_id


def publish_image(uri: str) -> None:
    """Push an image of ``<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>`` into moto's ECR of that region
    (moto keeps one account: it answers BatchGetImage of another registry id from its own repositories)."""
    import json
    import re

    import boto3

    found = re.fullmatch(r"\d{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com/([^:]+):(.+)", uri)
    assert found, uri
    region, repository, tag = found.groups()
    ecr = boto3.client("ecr", region_name=region)
    try:
        ecr.create_repository(repositoryName=repository)
    except ecr.exceptions.RepositoryAlreadyExistsException:
        pass
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": [],
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 2,
                           "digest": "sha256:" + "0" * 64}}
    ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag)


def publish_parameter(region: str, name: str, value: str) -> None:
    """Publish an AWS public SSM parameter (``/aws/service/...``) in moto's ``region``, as AWS does: moto loads only
    some of them (Amazon Linux and ECS AMIs) and refuses PutParameter under that reserved prefix, as SSM does."""
    import datetime as dt

    from moto.ssm.models import Parameter, ssm_backends

    ssm_backends[ACCOUNT][region]._parameters[name].append(Parameter(
        account_id=ACCOUNT, name=name, value=value, parameter_type="String", description=None, allowed_pattern=None,
        keyid=None, last_modified_date=dt.datetime.now(dt.UTC), version=1, data_type="text",
    ))


def publish_eks_release(region: str, release: str, release_version: str, *, minor: str = "1.35") -> str:
    """The EKS AL2023 Neuron AMI of ``release`` (``v20260930``) published in ``region`` with its release version
    (``1.35.8-20260930``), as EKS publishes it: an AMI and its public parameters; its id."""
    from trainium_cdk.cli.doctor_deploy import NEURON_AMI_PARAMETER

    ami_id = publish_ami(region, f"amazon-eks-node-al2023-x86_64-neuron-{minor}-{release}",
                         f"EKS-optimized Kubernetes node based on Amazon Linux 2023, (k8s: {minor}, neuron)",
                         dt.datetime(2026, 9, 30, tzinfo=dt.UTC))
    for leaf, value in (("image_id", ami_id), ("release_version", release_version)):
        publish_parameter(region, NEURON_AMI_PARAMETER.format(minor=minor, release=release, leaf=leaf), value)
    return ami_id
