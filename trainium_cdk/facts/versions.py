"""Every pinned version the project emits: images, charts, Kubernetes. One place, read everywhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Kubernetes version of the EKS cluster; the kubectl layer package aws-cdk.lambda-layer-kubectl-v35
# in requirements.txt must match it, and manifests are validated against this version.
KUBERNETES_VERSION = "1.35"
# Every pin that follows the Kubernetes minor is a table keyed by the minor, never built from it by string
# formatting: a patch or build that nobody checked exists must not appear when the minor moves. A minor the
# project ships has a row in each table (tests/meta/test_pins.py); `make pins` prints them with their sources.
# The Kubernetes patch of the EKS AL2023 AMI builds the tracks pin (see EKS_AL2023_AMI_RELEASE below):
# 1.35.8 is Kubernetes 1.35's build of release v20260930.
# No 1.36 row: the newest awslabs/amazon-eks-ami CHANGELOG reached (v20260714: 1.35.6-20260714 and
# 1.36.2-20260714) predates v20260930, whose 1.36 build nobody here has read
# (tests/data/upstream/kubernetes-1.36.json). A minor is deployable only with a row in every table (SUPPORTED_
# KUBERNETES_VERSIONS below).
EKS_AL2023_KUBERNETES_PATCHES: Mapping[str, str] = {"1.35": "1.35.8"}
EKS_AL2023_KUBERNETES_PATCH = EKS_AL2023_KUBERNETES_PATCHES[KUBERNETES_VERSION]


def eks_al2023_kubernetes_patch(minor: str | None = None) -> str:
    """The Kubernetes patch of the pinned EKS AMI release for ``minor`` (default: the shipped minor, read when
    called, so that a test that moves KUBERNETES_VERSION moves what the app synthesizes)."""
    return EKS_AL2023_KUBERNETES_PATCHES[minor or KUBERNETES_VERSION]

# EKS managed add-ons, per Kubernetes minor. EKS does not update add-ons on a cluster version upgrade
# ("Update an Amazon EKS add-on"): each is pinned here and moves with KUBERNETES_VERSION. Figures are the
# Amazon EKS User Guide's tables of the latest version per minor where the Guide has one (coredns, kube-proxy);
# the others, versions EKS lists for the minor as public configurations of clusters of that minor pin them
# (tests/data/upstream/eks-addon-versions.json names each source and what kind of figure it is); None where no
# source read gives one (the add-on then takes EKS's default for the minor, and `make pins` says so).
EKS_ADDON_VERSIONS: Mapping[str, Mapping[str, str | None]] = {
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.5",
        "coredns": "v1.14.3-eksbuild.3",
        "kube-proxy": "v1.35.3-eksbuild.13",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.2",
        "aws-fsx-csi-driver": None,
        "eks-node-monitoring-agent": "v1.6.2-eksbuild.1",
        "amazon-cloudwatch-observability": None,
    },
    "1.36": {
        "vpc-cni": None,
        "coredns": "v1.14.3-eksbuild.3",
        "kube-proxy": "v1.36.0-eksbuild.14",
        "eks-pod-identity-agent": None,
        "aws-fsx-csi-driver": None,
        "eks-node-monitoring-agent": None,
        "amazon-cloudwatch-observability": None,
    },
}


def eks_addon_version(name: str, minor: str | None = None) -> str | None:
    """The pinned version of EKS add-on ``name`` for Kubernetes ``minor`` (default: the shipped minor, read when
    called; None: no verified figure)."""
    return EKS_ADDON_VERSIONS[minor or KUBERNETES_VERSION][name]


# Neuron device plugin and scheduler extension: the tags the Neuron Helm chart 1.10.0 pins (its `helm show values`,
# transcribed with the chart's digest in tests/data/upstream/device-plugins.json, which also lists what of the chart's
# DaemonSet and scheduler charts/neuron_device_plugin.py mirrors).
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.32.0.0"
NEURON_SCHEDULER_IMAGE = "public.ecr.aws/neuron/neuron-scheduler:2.32.0.0"
# neuron-monitor is versioned apart from the SDK; 1.3.0 is the tag AWS's Neuron operator pins.
NEURON_MONITOR_IMAGE = "public.ecr.aws/neuron/neuron-monitor:1.3.0"

# The second kube-scheduler that consults the Neuron scheduler extension: same minor as the cluster,
# or its informers may not know the cluster's API (upstream kube-scheduler, not a Neuron build).
# v1.36.0: Kubernetes 1.36's first release (tests/data/upstream/kubernetes-1.36.json).
KUBE_SCHEDULER_TAGS: Mapping[str, str] = {"1.35": "v1.35.0", "1.36": "v1.36.0"}
KUBE_SCHEDULER_REPOSITORY = "registry.k8s.io/kube-scheduler"
KUBE_SCHEDULER_IMAGE = KUBE_SCHEDULER_REPOSITORY + ":" + KUBE_SCHEDULER_TAGS[KUBERNETES_VERSION]


def kube_scheduler_image(minor: str | None = None) -> str:
    """The kube-scheduler image of ``minor`` (default: the shipped minor, read when called)."""
    return KUBE_SCHEDULER_REPOSITORY + ":" + KUBE_SCHEDULER_TAGS[minor or KUBERNETES_VERSION]

# EFA device plugin (eks-charts aws-efa-k8s-device-plugin). EKS publishes its add-on images in one
# ECR registry per region; a few opt-in regions use another account, none of them offers Trainium.
# v0.5.20: the image tag of aws/eks-charts' chart (v0.5.30) on 2026-08-03 (tests/data/upstream/device-plugins.json).
EFA_DEVICE_PLUGIN_TAG = "v0.5.20"
EKS_ADDON_REGISTRY_ACCOUNT = "602401143452"


def efa_device_plugin_image(region: str) -> str:
    """The EFA device plugin image in the EKS registry of ``region`` (a CDK token works too)."""
    return (
        f"{EKS_ADDON_REGISTRY_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/eks/aws-efa-k8s-device-plugin:"
        f"{EFA_DEVICE_PLUGIN_TAG}"
    )


# AWS Neuron Deep Learning Containers for PyTorch training (account 763104351884, per-region ECR); the tag
# of each track is in its table below.
NEURON_TRAINING_IMAGE_REPOSITORY = "pytorch-training-neuronx"
NEURON_DLC_ACCOUNT = "763104351884"
# The same images in the public ECR Gallery (aws-neuron/deep-learning-containers lists both): pulls
# need no login, which is what a `docker build` at deploy time (the example image) can count on.
NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY = "public.ecr.aws/neuron/pytorch-training-neuronx"


def neuron_training_image(region: str, track: str = "xla") -> str:
    """The Neuron PyTorch training container of ``track`` in ``region``."""
    return (
        f"{NEURON_DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/"
        f"{NEURON_TRAINING_IMAGE_REPOSITORY}:{NEURON_TRACKS[track].training_image_tag}"
    )


def neuron_public_training_image(track: str = "xla") -> str:
    """The Neuron PyTorch training container of ``track`` in the public ECR Gallery: the base every image the
    project builds starts FROM (the examples, `trn image init`, the recipes)."""
    return f"{NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY}:{NEURON_TRACKS[track].training_image_tag}"

# The AWS CDK CLI the pipeline's synth runs: package.json pins the same for `make synth` (a test keeps
# them equal); here so that an installed wheel, which carries no package.json, knows it too.
CDK_CLI_VERSION = "2.1148.1"

# AWS ParallelCluster: the custom resource provider template (per version and region), the pcluster
# CLI users run, and the package whose schema the tests validate our cluster configuration against.
PARALLELCLUSTER_VERSION = "3.16.1"
# The Slurm it ships (release notes: "Upgrade Slurm to version 25.11.8"); the real-Slurm test runs Debian's 22.05.
PARALLELCLUSTER_SLURM_VERSION = "25.11.8"
# Slurm's accounting database (teams): Aurora MySQL 3.10 LTS (MySQL 8.0.42), aws-cdk-lib 2.275's newest VER_3_10_4.
AURORA_MYSQL_VERSION = "3.10.4"


def parallelcluster_provider_template_url(region: str, url_suffix: str = "amazonaws.com") -> str:
    """ParallelCluster's published CloudFormation custom resource provider for ``region``."""
    return (
        f"https://{region}-aws-parallelcluster.s3.{region}.{url_suffix}/parallelcluster/"
        f"{PARALLELCLUSTER_VERSION}/templates/custom_resource/cluster.yaml"
    )


# -- Neuron software tracks -------------------------------------------------------------------------
# One table per supported track: every backend (EKS and Batch containers, ParallelCluster hosts, the
# development instance) reads the track its config names, so that driver, runtime and framework agree.
# AMIs are never `latest` or `recommended` (they move under a running cluster), and never a parameter
# the user has to write: each is pinned by name and resolved by the app itself (see below).

# Batch nodes: the ECS-optimized AL2023 AMI's Neuron variant, by AMI name, through the immutable
# per-AMI-name public parameter AWS publishes beside `recommended` in every region:
# /aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/<ami-name>/image_id (the ECS guide's
# "Retrieving Amazon ECS-optimized Linux AMI metadata": `amazon-linux-2023/neuron/<version>`;
# `inf/` is Amazon Linux 2's Neuron variant). The name below is in aws/amazon-ecs-ami's release
# 20260922 and in the Parameter Store dump moto 5.2.5 ships (moto/ssm/resources/ecs/optimized_amis,
# every region); tests/app/test_ami.py reads that dump. The user data then installs the track's driver
# when the AMI carries another one, so one ECS AMI serves every track.
ECS_NEURON_AMI_PARAMETER_PREFIX = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron"
ECS_NEURON_AMI_NAME = "al2023-ami-ecs-neuron-hvm-2023.0.20260922-kernel-6.1-x86_64"


# The EFA installer a Batch node runs when its AMI has no EFA kernel module (node/batch_node.sh): a version and
# its SHA-256, never `aws-efa-installer-latest.tar.gz`, whose content moves under a running compute environment;
# the node checks the digest before extracting and joins no cluster when it differs. 1.41.0 is the newest
# version whose checksum could be cited on 2026-11-26: the SHA-256 below is the one AWS ParallelCluster pins
# for it (aws/aws-parallelcluster-cookbook pull 2953, 2025-05-19, cookbooks/aws-parallelcluster-environment/
# attributes/environment.rb), which that project copies from the EC2 user guide's table, "Verify the EFA
# installer using a checksum" (efa-verify.html; pulls 1614 and 2396 say so). ParallelCluster 3.16.3 ships
# 1.51.0, but no copy of that table or of its checksum was in reach (tests/data/upstream/efa-installer.json).
EFA_INSTALLER_VERSION = "1.41.0"
EFA_INSTALLER_SHA256 = "3506354cdfbe31ff552fe75f5d0d9bb7efd29cf79bd99457347d29c751c38f9f"
EFA_INSTALLER_URL = f"https://efa-installer.amazonaws.com/aws-efa-installer-{EFA_INSTALLER_VERSION}.tar.gz"

# Prometheus-format metrics (trainium_cdk/node/prometheus_node.py). Hosts (Batch, ParallelCluster) fetch the
# linux-amd64 release tarballs and check them against these SHA-256 digests (each the value of the release's
# sha256sums.txt, as copied by many independent public projects pinning the same release; no network here to
# fetch the file itself, 2026-11-27); EKS runs the release's own image, same version.
NODE_EXPORTER_VERSION = "1.12.1"
NODE_EXPORTER_SHA256 = "b51d8a76aa2a9156a55d501aca6276fae09e262259a5e4e831d2c2222f084e63"
NODE_EXPORTER_URL = (f"https://github.com/prometheus/node_exporter/releases/download/v{NODE_EXPORTER_VERSION}/"
                     f"node_exporter-{NODE_EXPORTER_VERSION}.linux-amd64.tar.gz")
NODE_EXPORTER_IMAGE = f"quay.io/prometheus/node-exporter:v{NODE_EXPORTER_VERSION}"
# EKS jobs push their metrics to the Prometheus Pushgateway (charts/job_metrics.py). Pinned by digest: the image
# index of prom/pushgateway v1.11.1 as two public projects pin it (no registry in reach here, 2026-11-27).
PUSHGATEWAY_VERSION = "1.11.1"
PUSHGATEWAY_IMAGE = (f"docker.io/prom/pushgateway:v{PUSHGATEWAY_VERSION}"
                     "@sha256:03738d278e082ee9821df730c741b3b465c251fc2b68a85883def301a55a6215")
PROMETHEUS_VERSION = "3.13.1"
PROMETHEUS_SHA256 = "962b812371aff838d152b6ff2d56fdb7a6396f5542f48ebf73421b9721f0d103"
PROMETHEUS_URL = (f"https://github.com/prometheus/prometheus/releases/download/v{PROMETHEUS_VERSION}/"
                  f"prometheus-{PROMETHEUS_VERSION}.linux-amd64.tar.gz")
# neuron-monitor-prometheus.py's one dependency (Neuron Monitor User Guide), installed when the host lacks it.
PROMETHEUS_CLIENT_VERSION = "0.21.1"


def ecs_neuron_ami_parameter(ami_name: str) -> str:
    """The public SSM parameter holding the image id of the ECS AL2023 Neuron AMI named ``ami_name``."""
    return f"{ECS_NEURON_AMI_PARAMETER_PREFIX}/{ami_name}/image_id"


# Development instance: the Neuron DLAMI. Neuron publishes SSM parameters only for `latest` ("Support
# for finding specific Neuron SDK version DLAMIs will be added in future releases"); a given SDK's DLAMI
# is the newest image owned by amazon whose name is the flavour's and whose description says "Neuron SDK
# <release>" (Neuron DLAMI guide, "Finding a DLAMI for a specific Neuron SDK version"). The app resolves
# that at deploy time in the stack's region (constructs/ami_lookup.py) and keeps it for the stack's life.
AMI_OWNER = "amazon"
AMI_ARCHITECTURE = "x86_64"  # every Trainium and Inferentia host


@dataclass(frozen=True)
class AmiQuery:
    """An AMI as `aws ec2 describe-images --owners amazon` finds it, newest CreationDate first."""

    name: str
    description: str = "*"
    owner: str = AMI_OWNER
    architecture: str = AMI_ARCHITECTURE

    def filters(self) -> list[dict[str, Any]]:
        """DescribeImages filters (the same in the deploy-time lookup and in `trn doctor`)."""
        found = [
            {"Name": "name", "Values": [self.name]},
            {"Name": "architecture", "Values": [self.architecture]},
            {"Name": "state", "Values": ["available"]},
        ]
        if self.description != "*":
            found.insert(1, {"Name": "description", "Values": [self.description]})
        return found

    @property
    def os_family(self) -> str:
        """ubuntu or amazon-linux: the root device and login user differ."""
        return "amazon-linux" if "Amazon Linux" in self.name else "ubuntu"


# DLAMI flavours as Neuron names them below /aws/service/neuron/dlami/ (<kind>/<os>), and the AMI names
# of each (Neuron DLAMI guide, "SSM Parameter Prefix" table): multi-framework and base, or a single
# framework "<framework>-<version>" such as pytorch-2.9 or jax-0.10.
DLAMI_OS_NAMES = {"ubuntu-24.04": "Ubuntu 24.04", "ubuntu-22.04": "Ubuntu 22.04", "amazon-linux-2023": "Amazon Linux 2023"}
DLAMI_KIND_NAMES = {"multi-framework": "Deep Learning AMI Neuron", "base": "Deep Learning Base Neuron AMI"}
DLAMI_FRAMEWORK_NAMES = {
    "pytorch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "pytorch-inference-vllm": "PyTorch Inference vLLM",
}
DLAMI_FLAVOUR_RULE = (
    "a Neuron DLAMI flavour <kind>/<os>: kind multi-framework, base or <framework>-<version> (framework "
    + ", ".join(DLAMI_FRAMEWORK_NAMES) + "), os " + ", ".join(DLAMI_OS_NAMES)
    + "; such as multi-framework/ubuntu-24.04, base/amazon-linux-2023 or pytorch-2.9/ubuntu-24.04"
)


def dlami_name(flavour: str) -> str | None:
    """The AMI name pattern of a DLAMI flavour, or None when the flavour is not one Neuron names."""
    kind, _, os_key = flavour.partition("/")
    os_name = DLAMI_OS_NAMES.get(os_key)
    if os_name is None:
        return None
    if kind in DLAMI_KIND_NAMES:
        return f"{DLAMI_KIND_NAMES[kind]} ({os_name})*"
    framework, _, version = kind.rpartition("-")
    if framework in DLAMI_FRAMEWORK_NAMES and version and all(p.isdigit() for p in version.split(".")):
        return f"Deep Learning AMI Neuron {DLAMI_FRAMEWORK_NAMES[framework]} {version} ({os_name})*"
    return None


@dataclass(frozen=True)
class NeuronTrack:
    """The Neuron software of one track, pinned together. Versions are those of the release content
    page of ``neuron_release`` (awsdocs-neuron, release-notes/releasecontent)."""

    name: str
    neuron_release: str
    released: str
    support: str
    instance_families: tuple[str, ...]
    driver: str  # aws-neuronx-dkms: the kernel module on every host
    apt_packages: Mapping[str, str]
    pip_packages: Mapping[str, str]
    framework: str  # the torch-neuronx line the training code imports
    training_image_tag: str
    dlami: AmiQuery  # the development instance's DLAMI when the config names no flavour
    ecs_neuron_ami: str  # the AMI name of the Batch nodes' ECS-optimized AL2023 Neuron AMI
    eks_ami_release: str  # a dated awslabs/amazon-eks-ami release (vYYYYMMDD) of the EKS AL2023 Neuron AMI
    parallelcluster_os: str
    python: str
    # Packages only the Neuron pip repository serves that the pip_packages need (their Requires-Dist), pinned to the
    # release's versions: installed with them from that repository alone (neuron_pip_pins, below).
    pip_dependencies: Mapping[str, str] = field(default_factory=dict)

    @property
    def neuron_pip_pins(self) -> tuple[str, ...]:
        """Every package this track takes from the Neuron pip repository, as ``name==version`` (exact: no glob, so that
        no other build of the name can satisfy it). Installed from that repository as the only index, without
        dependencies; everything else then comes from PyPI with these already satisfied (parallelcluster/
        neuron_setup.sh, README "Supply chain")."""
        return tuple(f"{name}=={version}" for name, version in {**self.pip_packages, **self.pip_dependencies}.items())

    @property
    def runtime(self) -> str:
        return self.apt_packages["aws-neuronx-runtime-lib"]

    @property
    def collectives(self) -> str:
        return self.apt_packages["aws-neuronx-collectives"]

    @property
    def eks_ami_predates_driver(self) -> bool:
        """Whether the EKS AMI release predates the Neuron release, so cannot carry its driver: the EKS nodes then
        install it at boot (node/eks_neuron_driver.sh); a later AMI release drops the install by itself."""
        built = self.eks_ami_release.removeprefix("v")
        return f"{built[:4]}-{built[4:6]}-{built[6:]}" < self.released

    @property
    def karpenter_ami_alias(self) -> str:
        """The Karpenter EC2NodeClass AMI alias of this track's EKS AMI release (``al2023@vYYYYMMDD``)."""
        return f"al2023@{self.eks_ami_release}"

    @property
    def eks_nodegroup_release_version(self) -> str:
        """A managed node group's releaseVersion of this track's EKS AMI release (``<Kubernetes patch>-<YYYYMMDD>``)."""
        return f"{eks_al2023_kubernetes_patch()}-{self.eks_ami_release.removeprefix('v')}"

    @property
    def ecs_neuron_ami_parameter(self) -> str:
        """The public per-AMI-name SSM parameter of the Batch nodes' AMI (immutable: never moves)."""
        return ecs_neuron_ami_parameter(self.ecs_neuron_ami)

    def dlami_query(self, flavour: str | None = None) -> AmiQuery:
        """The DLAMI of this track's Neuron SDK release: the track's own, or a flavour's (see dlami_name)."""
        if flavour is None:
            return self.dlami
        name = dlami_name(flavour)
        if name is None:
            raise ValueError(DLAMI_FLAVOUR_RULE)
        return AmiQuery(name, f"*Neuron SDK {self.neuron_release}*")


# XLA track: Neuron 2.29.1 (2026-05-01; 2.29.0 2026-04-09). Why this release: "Neuron no longer supports
# PyTorch/XLA for training starting with Neuron 2.30" (announce-no-support-pytorch-xla-training), so
# 2.29 is the last release that supports XLA training (2.30 and 2.31 still ship torch-neuronx 2.9 for
# inference; 2.32 ships none). 2.29.1 is its patch (aws-neuron-sdk release v2.29.1: neuronx-cc
# 2.24.5133.0 -> 2.24.8799.0, DLAMIs and DLCs rebuilt). PyTorch 2.9, Python 3.12, Ubuntu 24.04 (AL2023
# cannot run PyTorch 2.9: glibc 2.34; Ubuntu 22.04 is end of support on Neuron). NxD Training last
# shipped in 2.28 (announce-eos-nxdt-nxd-core-training): the example uses plain torch-xla DDP.
XLA_TRACK = NeuronTrack(
    name="xla",
    neuron_release="2.29.1",
    released="2026-05-01",
    support="last release supporting PyTorch/XLA training; XLA training unsupported from Neuron 2.30 (2026-05-21)",
    instance_families=("trn1", "trn1n", "trn2", "trn2u"),
    driver="2.27.4.0",
    apt_packages={
        "aws-neuronx-dkms": "2.27.4.0",
        "aws-neuronx-collectives": "2.31.24.0",
        "aws-neuronx-runtime-lib": "2.31.24.0",
        "aws-neuronx-tools": "2.29.22.0",  # Neuron 2.29.1's (2.29.18.0 was 2.29.0's)
    },
    # Exact versions of the release manifest (tests/data/neuron-release-2.29.1.json): torch-neuronx was the glob
    # 2.9.0.2.13.* before issue 33, which any later build of that line, from either index, satisfied.
    pip_packages={"neuronx-cc": "2.24.8799.0", "torch-neuronx": "2.9.0.2.13.26312", "neuronx_distributed": "0.18.27753"},
    # torch-neuronx 2.9 loads the Neuron PJRT plugin from libneuronxla (only on Neuron's repository; PyPI's
    # libneuronxla is AWS's 1.0 placeholder), at the release's version.
    # aws-neuronx-runtime-discovery 2.9: what libneuronxla environments install beside it; Neuron's manifest names
    # it at 2.9 in earlier 2.x releases, the vendored 2.29.1 entry does not list it (tests/app/test_neuron_tracks.py).
    pip_dependencies={"libneuronxla": "2.2.16408.0", "aws-neuronx-runtime-discovery": "2.9"},
    framework="torch-neuronx 2.9 (PyTorch/XLA)",
    # aws-neuron/deep-learning-containers image list: pytorch-training-neuronx, SDK 2.29.1.
    training_image_tag="2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
    # Neuron DLAMI guide: a DLAMI of a given SDK is found by its description ("Neuron SDK <version>").
    dlami=AmiQuery("Deep Learning AMI Neuron (Ubuntu 24.04)*", "*Neuron SDK 2.29.1*"),
    ecs_neuron_ami=ECS_NEURON_AMI_NAME,
    eks_ami_release="v20260930",
    parallelcluster_os="ubuntu2404",
    python="3.12",
)

# Native track: Neuron 2.34.0 (2026-11-30): TorchNeuron public beta (torch-neuronx 2.14.3.1, PyTorch 2.14: the
# `neuron` device, DDP/FSDP/DTensor, torch.compile), Trn2 and Trn3 only, Ubuntu 24.04/26.04
# (release-notes/components/torchneuron). tests/data/neuron-release-2.34.0.json holds the release's packages and says
# where each comes from (the release content page and torch-neuronx's v2.34.0 release; Neuron's manifest with 2.34.0
# was not reachable). Neuron DLCs are Ubuntu 26.04 / Python 3.14 only since 2.33.0 (setup/pytorch/update-dlc); the
# training tag follows that naming and is not checked against a published tag list (`trn doctor` asks the registry).
# The EKS AMI stays v20260930, built before 2.34.0 (amazon-eks-ami's CHANGELOG lists each release's driver; v20260714,
# the newest readable, has 2.29.0.0): the Trainium nodes install the pinned driver at boot (eks_ami_predates_driver).
NATIVE_TRACK = NeuronTrack(
    name="native",
    neuron_release="2.34.0",
    released="2026-11-30",
    support="public beta (TorchNeuron), Trn2 and Trn3 only",
    instance_families=("trn2", "trn2u"),
    driver="2.32.6.0",
    apt_packages={
        "aws-neuronx-dkms": "2.32.6.0",
        "aws-neuronx-collectives": "2.36.0.0",
        "aws-neuronx-runtime-lib": "2.36.8.0",
        "aws-neuronx-tools": "2.34.29.0",
    },
    # torch-neuronx: the release gives 2.14.3.1 with no build suffix. An exact pin: pip's == ignores a wheel's local
    # label (+hash, PEP 440), so a 2.14.3.1+<build> still satisfies it.
    pip_packages={"neuronx-cc": "2.29.16866.0", "torch-neuronx": "2.14.3.1", "nki": "0.8.0"},
    framework="torch-neuronx 2.14 (TorchNeuron, native PyTorch)",
    training_image_tag="2.14.0-neuronx-py314-sdk2.34.0-ubuntu26.04",
    # "Deep Learning AMI Neuron torch-neuronx 2.14.0" (Ubuntu 24.04 and 26.04; setup/pytorch/update-dlami, 2.33.0).
    dlami=AmiQuery("Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 24.04)*", "*Neuron SDK 2.34.0*"),
    ecs_neuron_ami=ECS_NEURON_AMI_NAME,
    eks_ami_release="v20260930",
    parallelcluster_os="ubuntu2404",
    python="3.12",
)

NEURON_TRACKS: Mapping[str, NeuronTrack] = {t.name: t for t in (XLA_TRACK, NATIVE_TRACK)}
DEFAULT_NEURON_TRACK = "xla"


# Volcano (gang scheduling for multi-node jobs), installed by the EKS stack from its vendored chart (HELM_CHART_DIGESTS).
# Volcano's compatibility matrix (README, v1.15.1) rates 1.13 up to Kubernetes 1.33 and 1.15 up to 1.35;
# 1.15.0 is the newest chart its Helm repository's index lists (tests/data/upstream/volcano-compatibility.json).
VOLCANO_HELM_REPOSITORY = "https://volcano-sh.github.io/helm-charts"
VOLCANO_CHART_VERSION = "1.15.0"
# Data loading: small public images from AWS's public registry, pinned by exact tag.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.49"
# Unpacking a dataset archive: the AWS CLI image (Amazon Linux 2, minimal) has no tar, and a container
# without capabilities cannot install one; BusyBox's tar, from the ECR copy of the Docker official image.
BUSYBOX_IMAGE = "public.ecr.aws/docker/library/busybox:1.37.0"
# The EKS node health checker (charts/node_health.py): node/health_check.py needs a Python 3 and its standard
# library only; the ECR copy of the Docker official image, pinned by version.
NODE_HEALTH_IMAGE = "public.ecr.aws/docker/library/python:3.13.7-alpine3.22"
# TensorBoard: the xla track's Neuron training image from the public ECR Gallery (NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY),
# which carries tensorboard (the BERT example's Dockerfile relies on it). Until issue 33 it was
# docker.io/tensorflow/tensorflow:2.20.0, from a registry neither AWS nor the project controls, by a mutable tag; no
# TensorBoard image published by AWS was found (public.ecr.aws/docker/library copies Docker's official images, and
# tensorflow is not one). The price: a training image's pull (several GB) on the node that runs TensorBoard, once.
TENSORBOARD_IMAGE = neuron_public_training_image("xla")


# Karpenter (EKS capacity from zero). 1.14.1 (2026-08) supports Kubernetes 1.35 (its compatibility
# matrix: 1.35 needs >= 1.9), EC2NodeClass networkInterfaces (efa-only) and placementGroupSelector, and
# capacityReservationSelectorTerms for ODCRs and Capacity Blocks (ReservedCapacity gate on since 1.6).
# The chart's version is the controller's (vendored: HELM_CHART_DIGESTS); its image is pinned by tag below as well.
# The *_HELM_REPOSITORY names say where upstream publishes a chart (`make pins`); no deploy reads them.
KARPENTER_VERSION = "1.14.1"
KARPENTER_HELM_REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter"
# Its CRDs, from their own chart at the same version: Helm installs a chart's crds/ once and never upgrades
# them (Karpenter's upgrade guide, "CRD Upgrades"); every release publishes both charts
# (hack/release/common.sh). Karpenter 1.15 is out, but its compatibility row could not be read here
# (tests/data/upstream/karpenter-compatibility.json): 1.14.1 stays until it is.
KARPENTER_CRD_HELM_REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter-crd"
KARPENTER_IMAGE_REPOSITORY = "public.ecr.aws/karpenter/controller"
# The EKS AL2023 AMI release of the Trainium nodes (its Neuron variant carries the driver): a dated
# release of awslabs/amazon-eks-ami, never `latest` (an alias al2023@latest, or a node group without
# releaseVersion, which EKS resolves to the newest release when it creates the group), which drifts
# nodes on every release. Karpenter takes it as the alias al2023@vYYYYMMDD; managed node groups as
# releaseVersion "<Kubernetes patch>-<YYYYMMDD>", the form EKS reports (describe-nodegroup) and publishes
# in /aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/x86_64/<variant>/recommended/release_version:
# 1.35.8-20260930 is Kubernetes 1.35's build of release v20260930 (AMI amazon-eks-node-al2023-x86_64-
# neuron-1.35-v20260930; the release version as public EKS configurations of 2026-10 pin it, after
# 1.35.7-20260911 and 1.35.8-20260923). Each track names its release (NeuronTrack.eks_ami_release); the EKS
# stack gives the nodes the configured track's (NeuronTrack.karpenter_ami_alias, .eks_nodegroup_release_version).
# These module names are the default track's: the constructs' defaults.
EKS_AL2023_AMI_RELEASE = XLA_TRACK.eks_ami_release
KARPENTER_AMI_ALIAS = XLA_TRACK.karpenter_ami_alias
EKS_NODEGROUP_RELEASE_VERSION = XLA_TRACK.eks_nodegroup_release_version

# Cluster Autoscaler (eks.capacity: managed): the kubernetes/autoscaler chart 9.59.0, with the
# autoscaler of the cluster's minor (an autoscaler newer than the cluster is unsupported upstream).
CLUSTER_AUTOSCALER_HELM_REPOSITORY = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
# v1.36.1: kubernetes/autoscaler release cluster-autoscaler-1.36.1, published with 1.35.2 on 2026-07-23
# (tests/data/upstream/kubernetes-1.36.json).
CLUSTER_AUTOSCALER_IMAGE_TAGS: Mapping[str, str] = {"1.35": "v1.35.2", "1.36": "v1.36.1"}
CLUSTER_AUTOSCALER_IMAGE_TAG = CLUSTER_AUTOSCALER_IMAGE_TAGS[KUBERNETES_VERSION]

# The Helm charts the EKS stack installs, vendored in trainium_cdk/helm_charts/<name>/ (its README names each one's
# source commit) and deployed as CDK assets, never pulled from a chart repository: the sha256 of each folder
# (constructs/vendored_charts.py tree_digest). tests/unit/charts/test_vendored_charts.py fails when a byte differs or a chart's
# Chart.yaml version is not its pin above; `make vendor-chart` refreshes one (README "Supply chain").
HELM_CHART_DIGESTS: Mapping[str, str] = {
    "karpenter": "e8eb23dc0ff893fd821356a5f7253f3f99f2433bd8de5ad3fb8e01cc591d43c9",
    "karpenter-crd": "b95a1e2833915a5de3a134745811563edabc90f87e5d5f92efc932d90e949ce8",
    "volcano": "c33b763efd18f43c2e66f0612fed0fd8213659a4e08b9fad4606c276417b701a",
    "cluster-autoscaler": "496a0f589fb36ba6118ae11d6efac243a157feddcc64616d26d54c76bb3b2acc",
}


def cluster_autoscaler_image_tag(minor: str | None = None) -> str:
    """The Cluster Autoscaler of ``minor`` (default: the shipped minor, read when called)."""
    return CLUSTER_AUTOSCALER_IMAGE_TAGS[minor or KUBERNETES_VERSION]


# The Kubernetes minors the app deploys: those with a row in every per-minor table above (tests/meta/test_pins.py) and
# rated by the Volcano and Karpenter the project pins (tests/data/upstream). 1.36 has rows for its add-ons, kube-
# scheduler and Cluster Autoscaler, but not for the EKS AMI release (above), and Volcano 1.15 is rated up to 1.35:
# the move to 1.36 is modelled (tests/app/test_day2.py) and told (README, "Upgrading EKS"), not shipped.
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = ("1.35",)
PER_MINOR_TABLES: Mapping[str, Mapping[str, Any]] = {
    "EKS_ADDON_VERSIONS": EKS_ADDON_VERSIONS, "EKS_AL2023_KUBERNETES_PATCHES": EKS_AL2023_KUBERNETES_PATCHES,
    "KUBE_SCHEDULER_TAGS": KUBE_SCHEDULER_TAGS, "CLUSTER_AUTOSCALER_IMAGE_TAGS": CLUSTER_AUTOSCALER_IMAGE_TAGS,
}

# titan-llama3's TorchTitan Neuron (beta, Neuron 2.34) on the native track's image, which its requirements.txt pins
# (test_recipe_titan_llama3.py checks); the CPU rehearsal runs PyPI's torchtitan (requirements-rehearsal.txt).
TORCHTITAN_NEURON_VERSION = "0.2.2+neuron.2"
TORCHTITAN_REHEARSAL_VERSION = "0.3.0"
