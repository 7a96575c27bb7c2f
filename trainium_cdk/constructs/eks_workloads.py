"""TrainingWorkloads: the example training image and the training workloads on a cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import cdk8s
from aws_cdk import RemovalPolicy
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_cdk.charts.training import JOB_CHART_PREFIX, QUEUE_CHART_ID
from trainium_cdk.constructs.nag import acknowledge
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.constructs.secrets import grant_secret_read
from trainium_cdk.constructs.training_images import DEFAULT_REMOVAL_POLICY, IMAGES_KEPT, TrainingImageRepository
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import (
    BASE_TAG_BUILD_ARG,
    DATA_LOADER_SERVICE_ACCOUNT,
    HF_TOKEN_SERVICE_ACCOUNT,
    TRAINING_NAMESPACE,
)

EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples" / "mlp"
# The BERT-large example image's build context: a Dockerfile that fetches the pinned sample script.
BERT_EXAMPLE_DIR = EXAMPLE_DIR.parent / "bert"
DEFAULT_BASE_IMAGE_TAG = versions.XLA_TRACK.training_image_tag
DEFAULT_REPOSITORY_REMOVAL_POLICY = DEFAULT_REMOVAL_POLICY


@dataclass(frozen=True)
class TrainingWorkloadsOptions:
    """What :class:`TrainingWorkloads` installs.

    :param data_loader_bucket: a bucket the data loader's service account may read (EKS Pod
        Identity). Default: none (no role).
    :param data_loader_prefix: the folder of that bucket it may list and read (``wiki/``; one without a
        trailing slash is taken as a folder, as ``aws s3 sync`` takes it). Default: "" (the whole bucket).
    :param namespace: namespace of the data loader's service account. Default: ``training``.
    :param data_loader_service_account: its name. Default: ``data-loader``.
    :param image_directory: the example image's Docker build context, or None: no image is built, and ``image``
        is the default training image. Default: the MLP example.
    :param image: the default training image when ``image_directory`` is None (the track's Neuron training
        image: the MLP example then needs its code from a ConfigMap). Default: none.
    :param bert_image_directory: the Docker build context of a second image, the BERT-large example's
        (``BERT_EXAMPLE_DIR``), or None. Default: none (no second image).
    :param base_image_tag: tag of the Neuron training image both build on (build arg ``BASE_TAG``).
        Default: the default Neuron track's.
    :param repository_removal_policy: what deleting the stack does to the ECR repository of training
        images. Default: ``RemovalPolicy.RETAIN``.
    :param images_kept: images the repository keeps (the oldest expire). Default: 100.
    :param hf_token_secret: the name of a Secrets Manager secret holding a Hugging Face token: the service account
        ``hf-token-reader`` of ``namespace`` may read it (EKS Pod Identity). Default: none (no role).
    """

    data_loader_bucket: str | None = None
    data_loader_prefix: str = ""
    namespace: str = TRAINING_NAMESPACE
    data_loader_service_account: str = DATA_LOADER_SERVICE_ACCOUNT
    image_directory: str | Path | None = EXAMPLE_DIR
    image: str | None = None
    bert_image_directory: str | Path | None = None
    base_image_tag: str = DEFAULT_BASE_IMAGE_TAG
    repository_removal_policy: RemovalPolicy = DEFAULT_REPOSITORY_REMOVAL_POLICY
    images_kept: int = IMAGES_KEPT
    hf_token_secret: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.images_kept, int) or self.images_kept < 1:
            raise ConfigError("TrainingWorkloadsOptions.images_kept", self.images_kept, "at least 1")
        if (self.image_directory is None) == (self.image is None):
            raise ConfigError("TrainingWorkloadsOptions.image", self.image,
                              "an image exactly when image_directory is None (the image built, or the one given)")
        directories = {"image_directory": self.image_directory, "bert_image_directory": self.bert_image_directory}
        for name, directory in directories.items():
            if directory is not None and not Path(directory, "Dockerfile").is_file():
                raise ConfigError(f"TrainingWorkloadsOptions.{name}", str(directory), "a directory with a Dockerfile")


class TrainingWorkloads(Construct):
    """Everything that trains on the cluster.

    - the example image, a Docker image asset built and pushed at deploy time (synth only hashes the
      folder: no Docker needed to synthesize), the default image of every job (or, with no build context,
      the image the options give), and an ECR repository
      for your own training images (scanned on push, immutable tags, retained by default);
    - with ``bert_image_directory``, the BERT-large example image, built the same way (``bert_image``);
    - the workload charts given to :meth:`add_charts` (queue, jobs, data loader, shell pod, TensorBoard),
      applied after ``after``; the data loader's service account reads its bucket through EKS Pod Identity.

    :param cluster: the EKS cluster.
    :param options: what to install. Default: the example image and the repository.
    :param after: manifests the workloads need first (the namespace, the FSx volume and claim).
        Default: none.
    :param volcano: the cluster's Volcano (``TrainiumCluster.volcano``): the queue and jobs need its
        CRDs first. Default: none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        options: TrainingWorkloadsOptions | None = None,
        after: Sequence[Construct] = (),
        volcano: eks.HelmChart | None = None,
    ) -> None:
        options = options or TrainingWorkloadsOptions()
        super().__init__(scope, construct_id)
        self.repository = TrainingImageRepository(
            self, "TrainingImages", images_kept=options.images_kept, removal_policy=options.repository_removal_policy
        )
        self.image = None if options.image_directory is None else ecr_assets.DockerImageAsset(
            self,
            "ExampleImage",
            directory=str(options.image_directory),
            platform=ecr_assets.Platform.LINUX_AMD64,
            build_args={BASE_TAG_BUILD_ARG: options.base_image_tag},
        )
        self._image = options.image
        # On the same base as the example image: a deploy pushes only the layers the base lacks.
        self.bert_image = None if options.bert_image_directory is None else ecr_assets.DockerImageAsset(
            self,
            "BertImage",
            directory=str(options.bert_image_directory),
            platform=ecr_assets.Platform.LINUX_AMD64,
            build_args={BASE_TAG_BUILD_ARG: options.base_image_tag},
        )
        self.volcano = volcano
        if options.data_loader_bucket is not None:
            self.data_loader_role, _ = pod_identity_role(
                self,
                "DataLoader",
                cluster=cluster,
                namespace=options.namespace,
                service_account=options.data_loader_service_account,
                description="Reads the data loader's S3 prefix for the data-loader Job (EKS pod identity)",
            )
            self._grant_prefix_read(self.data_loader_role, options.data_loader_bucket, options.data_loader_prefix)
        self.hf_token_role: iam.Role | None = None
        if options.hf_token_secret is not None:
            # The recipes' data jobs read the token at run time, by the secret's name; the stack's
            # hf-token-reader chart creates the service account they run as.
            self.hf_token_role, _ = pod_identity_role(
                self, "HfToken", cluster=cluster, namespace=options.namespace, service_account=HF_TOKEN_SERVICE_ACCOUNT,
                description="Reads the Hugging Face token's secret for the recipes' data jobs (EKS pod identity)",
            )
            grant_secret_read(self, self.hf_token_role, options.hf_token_secret)
        self._cluster = cluster
        self._after = tuple(after)
        self.charts: dict[str, cdk8s.Chart] = {}
        self.manifests: dict[str, eks.KubernetesManifest] = {}

    def _grant_prefix_read(self, role: iam.Role, bucket_name: str, prefix: str) -> None:
        """What ``aws s3 sync s3://bucket/prefix/`` needs (ListObjectsV2 under the prefix, GetObject), and no more."""
        folder = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        bucket = s3.Bucket.from_bucket_name(self, "DataBucket", bucket_name)
        listing = {"StringLike": {"s3:prefix": [f"{folder}*"]}} if folder else None
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn], conditions=listing))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{folder}*")]))
        acknowledge(
            role, "AwsSolutions-IAM5", [f"Resource::arn:<AWS::Partition>:s3:::{bucket_name}/{folder}*"],
            "Reading a dataset folder: GetObject on the objects under the prefix the config names, and only those.",
        )

    def add_charts(self, charts: Mapping[str, cdk8s.Chart]) -> dict[str, eks.KubernetesManifest]:
        """Apply workload charts (jobs, data loader, shell, TensorBoard), by chart id, each as a manifest
        of the cluster after ``after``; build them with ``image_uri`` as the default training image.
        ``volcano-queue`` (``QUEUE_CHART_ID``) and ``job-*`` charts are applied after Volcano, jobs after
        the queue. Returns the new manifests by chart id."""
        added: dict[str, eks.KubernetesManifest] = {}
        for chart_id, chart in charts.items():
            if chart_id in self.charts:
                raise ConfigError("charts", chart_id, "a chart id not added before")
            manifest = self._cluster.add_cdk8s_chart(chart_id, chart)
            for dependency in self._after:
                manifest.node.add_dependency(dependency)
            # Volcano's CRDs must exist before its queue and jobs.
            if self.volcano is not None and (chart_id == QUEUE_CHART_ID or chart_id.startswith(JOB_CHART_PREFIX)):
                manifest.node.add_dependency(self.volcano)
            self.charts[chart_id] = chart
            self.manifests[chart_id] = added[chart_id] = manifest
        if QUEUE_CHART_ID in self.manifests:
            queue = self.manifests[QUEUE_CHART_ID]
            for chart_id, manifest in self.manifests.items():
                if chart_id.startswith(JOB_CHART_PREFIX) and (chart_id in added or QUEUE_CHART_ID in added):
                    manifest.node.add_dependency(queue)
        return added

    @property
    def image_uri(self) -> str:
        """The default training image of the charts given to add_charts: the example image's URI (a token), or the
        image given."""
        if self.image is not None:
            return self.image.image_uri
        assert self._image is not None  # the options hold one or the other
        return self._image
