"""Every pinned version the project emits: images, charts, Kubernetes. One place, read everywhere."""

from __future__ import annotations

# Kubernetes version of the EKS cluster; the kubectl layer package aws-cdk.lambda-layer-kubectl-v35
# in requirements.txt must match it, and manifests are validated against this version.
KUBERNETES_VERSION = "1.35"

# Neuron device plugin image (Neuron Helm chart 1.9.0 ships this tag).
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.31.0.0"
NEURON_SCHEDULER_IMAGE = "public.ecr.aws/neuron/neuron-scheduler:2.31.0.0"
NEURON_MONITOR_IMAGE = "public.ecr.aws/neuron/neuron-monitor:1.6.0"

# EFA device plugin (eks-charts aws-efa-k8s-device-plugin, v0.5.x).
EFA_DEVICE_PLUGIN_IMAGE = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.6"
