"""The `pcluster build-image` configuration of a deployment: ParallelCluster's official Ubuntu AMI of the
pinned ParallelCluster version, with the Neuron track's driver, runtime, collectives and tools installed.

Without it, every compute node installs those packages when it boots (``neuron_setup.sh``, the queues'
OnNodeConfigured action), and installing aws-neuronx-dkms builds the driver for the node's kernel (DKMS)
at every scale-up. An image built from this configuration carries the built driver; with
``parallelcluster.custom_ami`` set to it, the setup script finds the pinned packages installed and the
pinned driver loaded, and installs nothing.

The image's component runs the same ``neuron_setup.sh`` (embedded unchanged) with the same package pins
(:func:`~trainium_cdk.app.parallelcluster.cluster_config.apt_args`), in its ``--image`` mode: one install
path, one set of pins. No CDK here; ``write_dist`` writes both files into ``dist/parallelcluster/``.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from trainium_cdk.app.config import Config
from trainium_cdk.app.parallelcluster.cluster_config import SCRIPTS_BUCKET, SCRIPTS_PREFIX, apt_args, placeholder
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.versions import PARALLELCLUSTER_VERSION, NeuronTrack
from trainium_cdk.parallelcluster.parts import SETUP_SCRIPT
from trainium_cdk.runtime import envsubst

# The instance that builds the image: building the driver needs the kernel headers and a compiler, not a
# Neuron device (public Neuron ParallelCluster AMI recipes build on non-Neuron types too), and a general
# purpose x86_64 type is offered in every region that has Trainium, at a fraction of its price.
DEFAULT_BUILD_INSTANCE_TYPE = "m7i.2xlarge"
# The image's root volume: the smallest compute root volume the config allows (compute_groups[].
# root_volume_gib >= 64), so that every queue can boot it; ParallelCluster's AMI needs 40.
IMAGE_ROOT_VOLUME_GIB = 64
ARCHITECTURE = "x86_64"
# How ParallelCluster names its official AMIs per OS (pcluster/constants.py OS_TO_IMAGE_NAME_PART_MAP;
# a test compares with the pinned package): aws-parallelcluster-<version>-<part>-<architecture>-*.
OFFICIAL_IMAGE_NAME_PART = {"ubuntu2204": "ubuntu-2204-lts-hvm", "ubuntu2404": "ubuntu-2404-lts-hvm"}
PARENT_IMAGE_PLACEHOLDER = "PARENT_IMAGE_ID"
# Every placeholder the image configuration may carry (the scripts bucket is the cluster's too).
IMAGE_PLACEHOLDERS = (PARENT_IMAGE_PLACEHOLDER, SCRIPTS_BUCKET)
COMPONENT_SCRIPT_NAME = "neuron-image-component.sh"
# The heredoc that carries neuron_setup.sh inside the component script (never a line of the script).
_HEREDOC = "TRAINIUM_CDK_NEURON_SETUP_SH"


def image_file_name(config: Config) -> str:
    return f"{config.project}-image.yaml"


def image_id(config: Config) -> str:
    """The `pcluster build-image --image-id`: letters, digits and hyphens only (no dots), one per release."""
    return f"{config.project}-neuron-{config.neuron_track.neuron_release.replace('.', '-')}"


def official_image_name(track: NeuronTrack) -> str:
    """The name prefix of ParallelCluster's official AMI of the pinned version for the track's OS: the
    version is in the name, so the parent never moves to another ParallelCluster release."""
    part = OFFICIAL_IMAGE_NAME_PART.get(track.parallelcluster_os)
    if part is None:
        raise ConfigError(
            "neuron.track", track.name, f"a track whose ParallelCluster OS is one of {sorted(OFFICIAL_IMAGE_NAME_PART)}"
        )
    return f"aws-parallelcluster-{PARALLELCLUSTER_VERSION}-{part}-{ARCHITECTURE}"


def parent_image_query(config: Config) -> str:
    """The command that prints the parent AMI id in the config's region: the newest image of that name,
    as ParallelCluster itself picks among its official images (`pcluster list-official-images`)."""
    return (
        f"aws ec2 describe-images --region {config.region} --owners amazon "
        f"--filters 'Name=name,Values={official_image_name(config.neuron_track)}*' "
        "--query 'sort_by(Images,&CreationDate)[-1].ImageId' --output text"
    )


def component_args(track: NeuronTrack) -> list[str]:
    """The setup script's arguments in the image: its --image mode and the track's package pins, the same
    ``--apt`` arguments the queues pass at boot."""
    return ["--image", "--sdk", track.neuron_release, *apt_args(track)]


def render_component_script(config: Config) -> str:
    """The image's component (ParallelCluster runs a script component without arguments): neuron_setup.sh,
    unchanged, run with :func:`component_args`."""
    setup = SETUP_SCRIPT.read_text()
    if _HEREDOC in setup.splitlines():
        raise ValueError(f"{SETUP_SCRIPT.name} contains the heredoc delimiter {_HEREDOC}")
    track = config.neuron_track
    return "\n".join([
        "#!/bin/bash",
        f"# trainium-cdk: `pcluster build-image` component of {config.project}: the Neuron {track.neuron_release} "
        f"host packages of the {track.name} track",
        "# (driver built here by DKMS, once), installed by neuron_setup.sh (below, unchanged) in its --image mode.",
        "set -euo pipefail",
        'setup="$(mktemp)"',
        "trap 'rm -f \"${setup}\"' EXIT",
        f"cat > \"${{setup}}\" <<'{_HEREDOC}'",
        setup.rstrip("\n"),
        _HEREDOC,
        'bash "${setup}" ' + " ".join(shlex.quote(a) for a in component_args(track)),
        "",
    ])


def image_configuration(
    config: Config,
    *,
    parent_image: str,
    component_url: str,
    build_instance_type: str = DEFAULT_BUILD_INSTANCE_TYPE,
) -> dict[str, Any]:
    """The ParallelCluster 3 image configuration.

    :param parent_image: ParallelCluster's official AMI of :func:`official_image_name` in the region.
    :param component_url: where the nodes read :func:`render_component_script` (s3:// or https://).
    :param build_instance_type: the build instance; default ``DEFAULT_BUILD_INSTANCE_TYPE``.
    """
    track = config.neuron_track
    tags = [{"Key": "project", "Value": config.project}, {"Key": "neuron-release", "Value": track.neuron_release}]
    tags += [{"Key": k, "Value": v} for k, v in sorted(config.tags.items())]
    return {
        "Region": config.region,
        "Image": {
            "Name": f"{config.project}-neuron-{track.neuron_release}",
            "RootVolume": {"Size": IMAGE_ROOT_VOLUME_GIB, "Encrypted": True},
            "Tags": tags,
        },
        "Build": {
            "InstanceType": build_instance_type,
            "ParentImage": parent_image,
            # The official AMI's packages and kernel as ParallelCluster released them: the image differs
            # from its parent by the pinned Neuron packages only, and the driver is built for that kernel.
            "UpdateOsPackages": {"Enabled": False},
            "Components": [{"Type": "script", "Value": component_url}],
            "Tags": [dict(tag) for tag in tags],
        },
    }


def render_image_yaml(config: Config) -> str:
    """The image configuration for `pcluster build-image`, with ``${NAME}`` placeholders for what is known
    only in the user's account (the parent AMI id of the region, the scripts bucket)."""
    component_url = f"s3://{placeholder(SCRIPTS_BUCKET)}/{SCRIPTS_PREFIX}/{COMPONENT_SCRIPT_NAME}"
    body = yaml.safe_dump(
        image_configuration(config, parent_image=placeholder(PARENT_IMAGE_PLACEHOLDER), component_url=component_url),
        sort_keys=False,
    )
    region, image = config.region, image_id(config)
    name = image_file_name(config)
    names = envsubst.placeholders_in(body, IMAGE_PLACEHOLDERS)
    header = [
        f"# ParallelCluster {PARALLELCLUSTER_VERSION} image of {config.project}'s compute nodes, generated by trainium-cdk:",
        f"# {official_image_name(config.neuron_track)}* with the Neuron {config.neuron_track.neuron_release} driver "
        "built in (no DKMS build at scale-up).",
        f"#   export {PARENT_IMAGE_PLACEHOLDER}=$({parent_image_query(config)})",
        f"#   export SCRIPTS_BUCKET=...   # this directory uploaded to s3://$SCRIPTS_BUCKET/{SCRIPTS_PREFIX}/",
        *envsubst.header(names, f"dist/parallelcluster/{name}", "> image.yaml"),
        f"#   pcluster build-image --region {region} --image-id {image} -c image.yaml",
        f"#   pcluster describe-image --region {region} --image-id {image} --query ec2AmiInfo.amiId",
        "# then parallelcluster.custom_ami: <that AMI id> in the config, and deploy.",
    ]
    return "\n".join(header) + "\n" + body
