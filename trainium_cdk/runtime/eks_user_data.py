"""The user data of EKS Trainium nodes: a MIME multi-part document that nodeadm (the AL2023 EKS AMI's node
initializer) and cloud-init read, built from parts: our NodeConfig (``node/eks_node_config.yaml``) and the
image pre-pull (``node/prepull_images.sh``, which reads the images from an SSM parameter at boot). Each feature is a function returning its parts; :func:`mime`
joins them, in one place, for the launch templates and the EC2NodeClasses alike.

Managed node groups with an EKS AMI type and Karpenter's EC2NodeClass both add their own NodeConfig (cluster,
kubelet flags) and nodeadm merges every NodeConfig part it finds, in order (nodeadm docs, "Merging multiple
configuration objects"); EKS requires MIME multi-part user data in a launch template of such a node group
(EKS user guide, "Customizing managed nodes with launch templates"). Shell parts (``text/x-shellscript``) run
under cloud-init, before nodeadm's run phase starts containerd and kubelet (amazon-eks-ami nodeadm-run.service:
``After=nodeadm-config.service cloud-final.service``). Pure Python: the chart and the constructs read it
without the config.

The NodeConfig turns on nodeadm's FastImagePull: containerd pulls and unpacks layers in parallel through the SOCI
snapshotter the AL2023 EKS AMI installs (its parallel-pull mode, not lazy loading: the snapshotter config nodeadm
writes enables ``parallel_pull_unpack``, nodeadm/internal/containerd/snapshotter); nodeadm ignores the gate below
4 vCPUs or 7 GiB (Trainium nodes are far above) and asks for at least 600 MiB/s of root volume throughput
(nodeadm docs, "Enabling fast image pull (experimental)"), which the node's launch template or EC2NodeClass gives
it. The YAML file carries no comment: nodeadm reads it as a YAML stream of objects.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainium_cdk import node
from trainium_cdk.facts.names import NEURON_YUM_REPO

# A part of the user data: (content type, body).
Part = tuple[str, str]

NODE_CONFIG_CONTENT_TYPE = "application/node.eks.aws"
SHELL_CONTENT_TYPE = "text/x-shellscript"
BOUNDARY = "//trainium-cdk//"
# The pre-pull script's inputs (node/prepull_images.sh): the SSM parameter that holds the images, separated by
# spaces, and its region. The user data names the parameter, never the images: a new image changes the parameter,
# not the nodes' launch template or EC2NodeClass, so it rolls no node group and drifts no Karpenter node.
PREPULL_PARAMETER_VARIABLE = "TRN_PREPULL_PARAMETER"
PREPULL_REGION_VARIABLE = "TRN_PREPULL_REGION"
# nodeadm's fast image pull asks for "at least 600MiB/s" of root volume throughput: below it pulls may be slower
# than without the feature (nodeadm docs, "Enabling fast image pull (experimental)"). gp3 allows it at its
# baseline 3000 IOPS (a gp3 volume's throughput may be up to 0.25 MiB/s per provisioned IOPS).
FAST_IMAGE_PULL_ROOT_VOLUME_THROUGHPUT = 600
DRIVER_SCRIPT = "eks_neuron_driver.sh"


def node_config() -> str:
    """Our NodeConfig document (YAML), as nodeadm reads it."""
    return node.source("eks_node_config.yaml")


def node_config_parts(*, fast_image_pull: bool) -> list[Part]:
    """The NodeConfig part that turns on FastImagePull, or none."""
    return [(NODE_CONFIG_CONTENT_TYPE, node_config())] if fast_image_pull else []


def prepull_parts(parameter: str | None, *, region: str = "") -> list[Part]:
    """The shell part that starts pulling, at boot, the images the SSM ``parameter`` in ``region`` lists
    (node/prepull_images.sh), or none without a parameter."""
    if parameter is None:
        return []
    program = node.program("prepull_images.sh", {PREPULL_PARAMETER_VARIABLE: parameter, PREPULL_REGION_VARIABLE: region},
                           shebang="/bin/bash")
    return [(SHELL_CONTENT_TYPE, program)]


def driver_parts(driver: str | None) -> list[Part]:
    """The shell part that installs Neuron driver ``driver`` at boot where the AMI's is older
    (node/eks_neuron_driver.sh), or none."""
    if driver is None:
        return []
    program = node.program(DRIVER_SCRIPT, {"NEURON_DRIVER": driver, "NEURON_YUM_REPO": NEURON_YUM_REPO},
                           shebang="/bin/bash")
    return [(SHELL_CONTENT_TYPE, program)]


def mime(parts: Sequence[Part]) -> str | None:
    """The parts as one MIME multi-part document, in order (NodeConfig parts first, as nodeadm merges them in
    order), or None when there are none (EKS and Karpenter then write the user data alone)."""
    if not parts:
        return None
    ordered = sorted(parts, key=lambda part: part[0] != NODE_CONFIG_CONTENT_TYPE)
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in ordered:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body.rstrip("\n"), ""]
    lines.append(f"--{BOUNDARY}--")
    return "\n".join(lines) + "\n"


def root_volume_throughput(*, fast_image_pull: bool) -> int | None:
    """The root volume throughput (MiB/s) the nodes need, or None for gp3's baseline."""
    return FAST_IMAGE_PULL_ROOT_VOLUME_THROUGHPUT if fast_image_pull else None
