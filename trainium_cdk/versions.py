"""Every pinned version the project emits: images, charts, Kubernetes. One place, read everywhere."""

from __future__ import annotations

# Kubernetes version of the EKS cluster; the kubectl layer package aws-cdk.lambda-layer-kubectl-v35
# in requirements.txt must match it, and manifests are validated against this version.
KUBERNETES_VERSION = "1.35"

# Neuron device plugin and scheduler extension (Neuron Helm chart 1.9.0 ships these tags).
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.31.0.0"
NEURON_SCHEDULER_IMAGE = "public.ecr.aws/neuron/neuron-scheduler:2.31.0.0"
# neuron-monitor is versioned apart from the SDK; 1.3.0 is the tag AWS's Neuron operator pins.
NEURON_MONITOR_IMAGE = "public.ecr.aws/neuron/neuron-monitor:1.3.0"

# The second kube-scheduler that consults the Neuron scheduler extension: same minor as the cluster,
# or its informers may not know the cluster's API (upstream kube-scheduler, not a Neuron build).
KUBE_SCHEDULER_IMAGE = f"registry.k8s.io/kube-scheduler:v{KUBERNETES_VERSION}.0"

# EFA device plugin (eks-charts aws-efa-k8s-device-plugin). EKS publishes its add-on images in one
# ECR registry per region; a few opt-in regions use another account, none of them offers Trainium.
EFA_DEVICE_PLUGIN_TAG = "v0.5.8"
EKS_ADDON_REGISTRY_ACCOUNT = "602401143452"


def efa_device_plugin_image(region: str) -> str:
    """The EFA device plugin image in the EKS registry of ``region`` (a CDK token works too)."""
    return (
        f"{EKS_ADDON_REGISTRY_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/eks/aws-efa-k8s-device-plugin:"
        f"{EFA_DEVICE_PLUGIN_TAG}"
    )


# AWS Neuron Deep Learning Container for PyTorch training (account 763104351884, per-region ECR).
# Neuron 2.26.1 (the patch AWS's DLC image list carries for 2.26; the 2.26.0 tag is superseded), the
# SDK of NEURON_SDK_VERSION below. PyTorch 2.8 is end of life from Neuron 2.29: the next step for every
# pin together is 2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04 (the last PyTorch/XLA line is 2.9).
NEURON_TRAINING_IMAGE_REPOSITORY = "pytorch-training-neuronx"
NEURON_TRAINING_IMAGE_TAG = "2.8.0-neuronx-py311-sdk2.26.1-ubuntu22.04"
NEURON_DLC_ACCOUNT = "763104351884"
# The same images in the public ECR Gallery (aws-neuron/deep-learning-containers lists both): pulls
# need no login, which is what a `docker build` at deploy time (the example image) can count on.
NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY = "public.ecr.aws/neuron/pytorch-training-neuronx"


def neuron_training_image(region: str) -> str:
    """The Neuron PyTorch training container in ``region``."""
    return (
        f"{NEURON_DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/"
        f"{NEURON_TRAINING_IMAGE_REPOSITORY}:{NEURON_TRAINING_IMAGE_TAG}"
    )

# AWS ParallelCluster: the custom resource provider template (per version and region), the pcluster
# CLI users run, and the package whose schema the tests validate our cluster configuration against.
PARALLELCLUSTER_VERSION = "3.16.1"


def parallelcluster_provider_template_url(region: str, url_suffix: str = "amazonaws.com") -> str:
    """ParallelCluster's published CloudFormation custom resource provider for ``region``."""
    return (
        f"https://{region}-aws-parallelcluster.s3.{region}.{url_suffix}/parallelcluster/"
        f"{PARALLELCLUSTER_VERSION}/templates/custom_resource/cluster.yaml"
    )


# Neuron SDK installed on hosts without a container (ParallelCluster nodes): 2.26.1, the patch of the
# 2.26 release the training container above carries (PyTorch NeuronX 2.8, Ubuntu 22.04, Python 3.10).
# Component versions from the Neuron 2.26.1 release content; a new SDK changes all of them together.
NEURON_SDK_VERSION = "2.26.1"
NEURON_APT_PACKAGES = {
    "aws-neuronx-dkms": "2.24.7.0",
    "aws-neuronx-collectives": "2.28.27.0",
    "aws-neuronx-runtime-lib": "2.28.23.0",
    "aws-neuronx-tools": "2.26.14.0",
}
NEURON_PIP_PACKAGES = {
    "neuronx-cc": "2.21.33363.0",
    "torch-neuronx": "2.8.*",
    "neuronx_distributed": "0.15.22404",
}


# Volcano (gang scheduling for multi-node jobs), from its Helm repository, installed by the EKS stack.
VOLCANO_HELM_REPOSITORY = "https://volcano-sh.github.io/helm-charts"
VOLCANO_CHART_VERSION = "1.13.0"
# Data loading and TensorBoard: small public images, pinned.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.49"
TENSORBOARD_IMAGE = "docker.io/tensorflow/tensorflow:2.20.0"


# Karpenter (EKS capacity from zero). 1.14.1 (2026-08) supports Kubernetes 1.35 (its compatibility
# matrix: 1.35 needs >= 1.9), EC2NodeClass networkInterfaces (efa-only) and placementGroupSelector, and
# capacityReservationSelectorTerms for ODCRs and Capacity Blocks (ReservedCapacity gate on since 1.6).
# The chart's version is the controller's; its image is pinned by tag below as well.
KARPENTER_VERSION = "1.14.1"
KARPENTER_HELM_REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter"
KARPENTER_IMAGE_REPOSITORY = "public.ecr.aws/karpenter/controller"
# The EKS AL2023 AMI release Karpenter resolves through the alias (the Neuron variant for Trainium
# types): a dated release of awslabs/amazon-eks-ami, never `latest`, which drifts every node on release.
EKS_AL2023_AMI_RELEASE = "v20260930"
KARPENTER_AMI_ALIAS = f"al2023@{EKS_AL2023_AMI_RELEASE}"

# Cluster Autoscaler (eks.capacity: managed): the kubernetes/autoscaler chart 9.59.0, with the
# autoscaler of the cluster's minor (an autoscaler newer than the cluster is unsupported upstream).
CLUSTER_AUTOSCALER_HELM_REPOSITORY = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
CLUSTER_AUTOSCALER_IMAGE_TAG = f"v{KUBERNETES_VERSION}.2"
