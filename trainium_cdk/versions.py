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
NEURON_TRAINING_IMAGE_REPOSITORY = "pytorch-training-neuronx"
NEURON_TRAINING_IMAGE_TAG = "2.8.0-neuronx-py311-sdk2.26.0-ubuntu22.04"
NEURON_DLC_ACCOUNT = "763104351884"


def neuron_training_image(region: str) -> str:
    """The Neuron PyTorch training container in ``region``."""
    return (
        f"{NEURON_DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/"
        f"{NEURON_TRAINING_IMAGE_REPOSITORY}:{NEURON_TRAINING_IMAGE_TAG}"
    )
