"""TrainingImageRepository: the ECR repository a team pushes its own training images to (`trn image push`)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ecr as ecr
from constructs import Construct

from trainium_cdk.errors import ConfigError, names_construct_path

IMAGES_KEPT = 100
# Where teams push their own training images; kept on destroy, like any artifact store.
DEFAULT_REMOVAL_POLICY = RemovalPolicy.RETAIN


class TrainingImageRepository(ecr.Repository):
    """An ECR repository of training images: scanned on push, tags immutable (a tag names one image for good,
    so that a job that names it runs what was pushed under it), the newest ``images_kept`` images kept.

    The repository has no name of its own (CloudFormation names it): a name is create-only, and two
    deployments in one account would collide. Read its URI from the stack output.

    :param images_kept: images the repository keeps (the oldest expire). Default: 100.
    :param removal_policy: what deleting the stack does to the repository. Default: ``RemovalPolicy.RETAIN``.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        images_kept: int = IMAGES_KEPT,
        removal_policy: RemovalPolicy = DEFAULT_REMOVAL_POLICY,
    ) -> None:
        if isinstance(images_kept, bool) or not isinstance(images_kept, int) or images_kept < 1:
            raise ConfigError("images_kept", images_kept, "at least 1")
        super().__init__(
            scope,
            construct_id,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            lifecycle_rules=[ecr.LifecycleRule(max_image_count=images_kept, description="keep the newest images")],
            removal_policy=removal_policy,
        )
