"""TrainingWorkloads: Volcano, the example training image, and the configured workloads on a cluster."""

from __future__ import annotations

from pathlib import Path

import cdk8s
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_cdk import versions
from trainium_cdk.namespaces import TRAINING_NAMESPACE
from trainium_cdk.charts.workloads import QUEUE_CHART_ID, workload_charts
from trainium_cdk.config import Config
from trainium_cdk.constructs.nag import acknowledge
from trainium_cdk.constructs.pod_identity import pod_identity_role

EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples" / "mlp"
VOLCANO_NAMESPACE = "volcano-system"
DATA_LOADER_SERVICE_ACCOUNT = "data-loader"
IMAGES_KEPT = 100
# Volcano's install waits for its controllers and admission webhook (image pulls on fresh nodes):
# more than Helm's 5 minute default, less than the 15 minutes the kubectl provider's Lambda may run.
VOLCANO_WAIT = Duration.minutes(10)
# Volcano's default scheduler configuration (chart config/volcano-scheduler.conf, 1.13) without the
# `enqueue` action: enqueue holds a gang's PodGroup Pending until the cluster has room, so its pods are
# never created and no autoscaler sees them; without it, allocate moves the PodGroup to Inqueue at once
# (pkg/scheduler/actions/allocate, "If not config enqueue action") and the pending pods ask Karpenter or
# Cluster Autoscaler for the whole gang. The gang plugin still binds all pods or none.
VOLCANO_SCHEDULER_CONFIG = """actions: "allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


class TrainingWorkloads(Construct):
    """Everything that trains on the cluster.

    - Volcano from its pinned Helm chart, and its queue (gang scheduling for multi-node jobs);
    - the MLP example image, a Docker image asset built and pushed at deploy time (synth only hashes
      the folder: no Docker needed to synthesize), the default image of every job, and an ECR
      repository for your own training images (scanned on push, immutable tags, retained);
    - the configured jobs, data loader (its service account reads the bucket through EKS Pod
      Identity), shell pod and TensorBoard, as cdk8s charts applied after the storage chart.

    :param cluster: the EKS cluster.
    :param config: the deployment's config (``workloads`` section).
    :param after: manifests the workloads need first (the FSx volume and claim).
    :param nodes: what must run before anything that waits for pods (the system node group); default none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: Config,
        after: list[eks.KubernetesManifest],
        nodes: Construct | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # Where teams push their own training images; kept on destroy, like any artifact store.
        self.repository = ecr.Repository(
            self,
            "TrainingImages",
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            lifecycle_rules=[ecr.LifecycleRule(max_image_count=IMAGES_KEPT, description="keep the newest images")],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.image = ecr_assets.DockerImageAsset(
            self,
            "ExampleImage",
            directory=str(EXAMPLE_DIR),
            platform=ecr_assets.Platform.LINUX_AMD64,
            build_args={"BASE_TAG": config.neuron_track.training_image_tag},
        )
        self.volcano: eks.HelmChart | None = None
        if config.workloads.volcano:
            self.volcano = cluster.add_helm_chart(
                "Volcano",
                chart="volcano",
                repository=versions.VOLCANO_HELM_REPOSITORY,
                version=versions.VOLCANO_CHART_VERSION,
                namespace=VOLCANO_NAMESPACE,
                create_namespace=True,
                wait=True,
                timeout=VOLCANO_WAIT,
                values={"custom": {"scheduler_config_override": VOLCANO_SCHEDULER_CONFIG}},
            )
            # Its admission webhook has no endpoints until its pods run somewhere.
            if nodes is not None:
                self.volcano.node.add_dependency(nodes)
        if config.workloads.data_loader is not None:
            self.data_loader_role, _ = pod_identity_role(
                self,
                "DataLoader",
                cluster=cluster,
                namespace=TRAINING_NAMESPACE,
                service_account=DATA_LOADER_SERVICE_ACCOUNT,
                description="Reads the dataset bucket for the data-loader Job (EKS pod identity)",
            )
            bucket = s3.Bucket.from_bucket_name(self, "DataBucket", config.workloads.data_loader.bucket)
            bucket.grant_read(self.data_loader_role)
            acknowledge(
                self.data_loader_role,
                "AwsSolutions-IAM5",
                ["Action::s3:GetBucket*", "Action::s3:GetObject*", "Action::s3:List*",
                 f"Resource::arn:<AWS::Partition>:s3:::{bucket.bucket_name}/*"],
                "Reading a whole dataset prefix: every object of the bucket the config names, read only.",
            )
        self.charts = workload_charts(cdk8s.App(), config, image=self.image.image_uri)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for chart_id, chart in self.charts.items():
            manifest = cluster.add_cdk8s_chart(chart_id, chart)
            for dependency in after:
                manifest.node.add_dependency(dependency)
            # Volcano's CRDs must exist before its queue and jobs.
            if self.volcano is not None and (chart_id == QUEUE_CHART_ID or chart_id.startswith("job-")):
                manifest.node.add_dependency(self.volcano)
            self.manifests[chart_id] = manifest
        if QUEUE_CHART_ID in self.manifests:
            for chart_id, manifest in self.manifests.items():
                if chart_id.startswith("job-"):
                    manifest.node.add_dependency(self.manifests[QUEUE_CHART_ID])
