"""`trn doctor`'s AMI checks: the image each deployed backend that picks one will boot, found in the
region as the deploy will find it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import error_code
from trainium_cdk.cli.doctor_local import FAIL, PASS, Check


def amis(config: Config, client: Callable[[str], Any]) -> list[Check]:
    """The AMI each deployed backend that picks one will boot, found in the region as the deploy will."""
    checks = []
    if "batch" in config.backends:
        checks.append(_batch_ami(config, client))
    if "instance" in config.backends:
        checks.append(_dlami(config, client))
    return checks


def _batch_ami(config: Config, client: Callable[[str], Any]) -> Check:
    from botocore.exceptions import ClientError

    if config.batch.ami_id is not None:
        return _given_ami(client, config.region, "AMI batch", config.batch.ami_id, "batch.ami_id")
    track = config.neuron_track
    parameter = track.ecs_neuron_ami_parameter
    try:
        image_id = client("ssm").get_parameter(Name=parameter)["Parameter"]["Value"]
    except ClientError as error:
        if error_code(error) != "ParameterNotFound":
            raise
        return Check(
            FAIL, "AMI batch", f"{track.ecs_neuron_ami} is not published in {config.region} ({parameter})",
            "set batch.ami_id to an ECS-optimized AL2023 Neuron AMI of this region: `aws ssm get-parameter --name "
            "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id` names the newest",
        )
    return Check(PASS, "AMI batch", f"{track.ecs_neuron_ami} is {image_id} in {config.region} "
                 "(AWS's per-AMI-name parameter: it never moves)")


def _dlami(config: Config, client: Callable[[str], Any]) -> Check:
    from trainium_cdk.lambdas.ami_lookup.index import NoMatchingImage, newest_image

    if config.instance.ami_id is not None:
        return _given_ami(client, config.region, "AMI instance", config.instance.ami_id, "instance.ami_id")
    track = config.neuron_track
    query = track.dlami_query(config.instance.dlami)
    try:
        image = newest_image(client("ec2"), [query.owner], query.filters())
    except NoMatchingImage:
        return Check(
            FAIL, "AMI instance", f"no DLAMI named {query.name!r} with description {query.description!r} "
            f"(Neuron SDK {track.neuron_release}) in {config.region}",
            "set instance.dlami to a flavour Neuron published for this release (`aws ec2 describe-images --owners "
            f"amazon --filters 'Name=description,Values={query.description}' --query 'Images[].Name'`), or "
            "instance.ami_id",
        )
    return Check(PASS, "AMI instance", f"{image.get('Name')} ({image['ImageId']}, {image.get('CreationDate', '?')}): "
                 "the deploy resolves this one and keeps it")


def _given_ami(client: Callable[[str], Any], region: str, name: str, ami_id: str, field: str) -> Check:
    from botocore.exceptions import ClientError

    try:
        images = client("ec2").describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as error:
        if not error_code(error).startswith("InvalidAMIID"):
            raise
        images = []
    if not images or images[0].get("State", "available") != "available":
        return Check(FAIL, name, f"{ami_id} ({field}) is not an available AMI in {region}",
                     f"set {field} to an AMI of {region} (AMI ids differ per region)")
    return Check(PASS, name, f"{ami_id} ({field}): {images[0].get('Name', '?')}")
