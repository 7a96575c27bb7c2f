"""The configuration sections of the backends: EKS, AWS Batch, ParallelCluster and the development instance."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from trainium_cdk.app.config.base import _Model
from trainium_cdk.app.config.fields import AmiId, AzId, Image, LogRetentionDays, check_az_id
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.addressing import check_ingress_cidr
from trainium_cdk.facts.catalog import (
    BATCH_MAX_ATTEMPTS,
    BATCH_MAX_UPDATE_TIMEOUT_MINUTES,
    GENERAL_PURPOSE_TYPES,
    GP3_MAX_GIB,
)
from trainium_cdk.facts.versions import DLAMI_FLAVOUR_RULE, dlami_name


class EksSettings(_Model):
    """The EKS backend: cluster, system nodes and the software on the cluster."""

    endpoint_access: Literal["public-and-private", "private"] = Field(
        "private", description="API server endpoint: private only (reach it from the VPC, a VPN or SSM), or "
        "public and private with public_access_cidrs."
    )
    public_access_cidrs: tuple[str, ...] = Field(
        (), description="IPv4 CIDRs allowed to reach a public endpoint (required with public-and-private)."
    )
    admin_role_arns: tuple[str, ...] = Field(
        (), description="IAM roles given cluster admin through access entries: yours, to use kubectl and trn "
        "(the only admins besides the kubectl provider's role, which applies the stack's manifests)."
    )
    creator_admin: bool = Field(
        False, description="Keep the cluster's creator (CloudFormation's role) a cluster admin: true only for a cluster an "
        "earlier trainium-cdk created (changing it replaces the cluster, which CloudFormation refuses)."
    )
    access_host: bool = Field(
        True, description="With a private endpoint: a t4g.nano reached by SSM only, through which `trn connect` "
        "forwards the API endpoint to the workstation."
    )
    system_instance_type: str = Field("m7i.large", description="Instance type of the system node group.")
    system_nodes: int = Field(defaults.SYSTEM_NODES, description="Nodes of the system node group (cluster add-ons).")
    neuron_scheduler_extension: bool = Field(False, description="Install the Neuron scheduler extension.")
    neuron_monitor: bool = Field(False, description="Install neuron-monitor with a Prometheus endpoint.")
    log_retention_days: LogRetentionDays = Field(
        defaults.LOG_RETENTION_DAYS, description="Retention of the control-plane log group and the kubectl provider's Lambda logs, days."
    )
    capacity: Literal["karpenter", "managed"] = Field(
        "karpenter", description="How Trainium nodes come and go: karpenter (a NodePool per compute group, "
        "nodes launched for pending pods), or managed (a managed node group per group, scaled by Cluster "
        "Autoscaler). Both start at zero nodes."
    )
    consolidate_after: str = Field(
        "10m", description="How long a Trainium node stays empty before it is removed (Karpenter "
        "consolidateAfter, Cluster Autoscaler scale-down-unneeded-time), such as 10m or 1h."
    )
    fast_image_pull: bool = Field(
        True, description="Trainium nodes pull images with nodeadm's FastImagePull (the SOCI snapshotter's parallel "
        "pull and unpack) on a root volume of 600 MiB/s; false: containerd's default pull on gp3's baseline."
    )
    example_images: bool = Field(
        False, description="Build the example images (the MLP example's; the BERT-large example's, which only this "
        "offers) FROM the Neuron training container on the deploying machine, which needs Docker or Finch and pulls "
        "several GB, and push them at deploy. false: the MLP example runs in the track's Neuron training image "
        "with its train.py from a ConfigMap, and the deploy builds nothing."
    )
    prepull_images: bool = Field(
        True, description="Trainium nodes start pulling the training images at boot (the track's Neuron image, "
        "base of the images the project builds, the example images, workloads.image and the jobs' images), while "
        "they join. The nodes read the list from an SSM parameter the stack writes, so a new image rolls no node."
    )

    @field_validator("consolidate_after")
    @classmethod
    def _consolidate_after(cls, value: str) -> str:
        if not re.fullmatch(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", value) or not value:
            raise ValueError("a duration such as 30s, 10m or 1h30m")
        return value

    @field_validator("admin_role_arns")
    @classmethod
    def _roles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not re.fullmatch(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/name)")
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> EksSettings:
        for i, cidr in enumerate(self.public_access_cidrs):
            check_ingress_cidr(f"public_access_cidrs[{i}]", cidr, example="203.0.113.0/24")
        if self.endpoint_access == "public-and-private" and not self.public_access_cidrs:
            raise ConfigError(
                "public_access_cidrs", [], "the CIDRs allowed to reach the public endpoint (or endpoint_access: private)"
            )
        if self.endpoint_access == "private" and self.public_access_cidrs:
            raise ConfigError("public_access_cidrs", list(self.public_access_cidrs), "only with endpoint_access: public-and-private")
        return self

    @property
    def access_host_deployed(self) -> bool:
        """The API access host exists: with a private endpoint, unless ``access_host`` turns it off."""
        return self.endpoint_access == "private" and self.access_host

    @field_validator("system_nodes")
    @classmethod
    def _system_nodes(cls, value: int) -> int:
        if not 1 <= value <= defaults.MAX_SYSTEM_NODES:
            raise ValueError(f"between 1 and {defaults.MAX_SYSTEM_NODES}")
        return value


class BatchSettings(_Model):
    """The AWS Batch backend: multi-node parallel jobs on the compute groups."""

    image_uri: Image | None = Field(
        None, description="Training image; default: the MLP example image, built at deploy time (Docker) on the "
        "track's AWS Neuron PyTorch training container (versions.py)."
    )
    command: tuple[str, ...] | None = Field(
        None, description="Command of each node; default: torchrun of the job definition's script parameter (the "
        "example's train.py in the example image, else /fsx/code/train.py) on all NeuronCores."
    )
    cpu_instance_type: str | None = Field(
        "m7i.2xlarge", description="General-purpose instance type of the CPU queue, where the recipes' data jobs run "
        "(0 instances when idle); null: no CPU queue, and those jobs take a node of their compute group."
    )
    job_timeout_minutes: int = Field(
        10080, description="A job attempt is stopped after this many minutes (default 7 days)."
    )
    runnable_timeout_minutes: int | None = Field(
        240, description="A job that waits this long in RUNNABLE because its instances cannot be had (no capacity, "
        "a group too small for it) is cancelled with that reason, so that the jobs behind it in its group's queue "
        "start: 10 to 1440, or null to wait. Groups with a capacity block wait for it regardless."
    )
    update_timeout_minutes: int | None = Field(
        None, description="After an infrastructure update (a Neuron pin, the AMI) running jobs go on this many "
        f"minutes, then stop and retry from their checkpoint on an updated host: 1 to {BATCH_MAX_UPDATE_TIMEOUT_MINUTES} "
        "(AWS Batch's limit). Longer keeps unpatched hosts longer. Default: job_timeout_minutes, at most "
        f"{BATCH_MAX_UPDATE_TIMEOUT_MINUTES}."
    )
    retry_attempts: int = Field(
        defaults.BATCH_RETRY_ATTEMPTS, description=f"Attempts of a job (1 to {BATCH_MAX_ATTEMPTS})."
    )
    log_retention_days: LogRetentionDays = Field(
        defaults.LOG_RETENTION_DAYS, description="Retention of the job log group, days."
    )
    ami_id: AmiId | None = Field(
        None,
        description="AMI of the nodes (ECS-optimized, with the Neuron driver); default: the track's ECS-optimized "
        "AL2023 Neuron AMI, read from AWS's public per-AMI-name parameter (versions.py).",
    )

    @field_validator("cpu_instance_type")
    @classmethod
    def _cpu_instance_type(cls, value: str | None) -> str | None:
        if value is not None and value not in GENERAL_PURPOSE_TYPES:
            raise ValueError("a general-purpose type; " + one_of(GENERAL_PURPOSE_TYPES))
        return value

    @field_validator("retry_attempts")
    @classmethod
    def _attempts(cls, value: int) -> int:
        if not 1 <= value <= BATCH_MAX_ATTEMPTS:
            raise ValueError(f"between 1 and {BATCH_MAX_ATTEMPTS} (AWS Batch limit)")
        return value

    @field_validator("job_timeout_minutes")
    @classmethod
    def _timeout(cls, value: int) -> int:
        if value < 1:
            raise ValueError("at least 1 minute")
        return value

    @field_validator("runnable_timeout_minutes")
    @classmethod
    def _runnable_timeout(cls, value: int | None) -> int | None:
        if value is not None and not 10 <= value <= 1440:
            raise ValueError("10 to 1440 minutes (AWS Batch jobStateTimeLimitActions), or null to wait")
        return value

    @field_validator("update_timeout_minutes")
    @classmethod
    def _update_timeout(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= BATCH_MAX_UPDATE_TIMEOUT_MINUTES:
            raise ValueError(f"1 to {BATCH_MAX_UPDATE_TIMEOUT_MINUTES} minutes (AWS Batch UpdatePolicy limit)")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("the training script and its arguments, or leave it out")
        return value


class ParallelClusterSettings(_Model):
    """The AWS ParallelCluster (Slurm) backend: one Slurm queue per compute group."""

    head_node_instance_type: str = Field("m7i.xlarge", description="Instance type of the Slurm head node.")
    head_node_subnet: Literal["public", "private"] = Field(
        "private", description="Head node in a public subnet, or a private one reached with SSM."
    )
    ssh_key_name: str | None = Field(None, description="EC2 key pair for SSH; default none (SSM only).")
    ssh_allowed_cidr: str | None = Field(
        None, description="IPv4 CIDR allowed to SSH to the head node; default: the VPC CIDR (never the internet)."
    )
    head_node_root_volume_gib: int = Field(200, description="Encrypted gp3 root volume of the head node, GiB.")
    deletion_policy: Literal["Delete", "Retain"] = Field(
        "Delete", description="What deleting the stack does to the cluster (ParallelCluster's DeletionPolicy)."
    )
    custom_ami: str | None = Field(
        None,
        description=(
            "AMI of the compute nodes, built with `pcluster build-image` from "
            "`dist/parallelcluster/<project>-image.yaml`: the Neuron driver is built into it, so scale-up installs "
            "nothing. Default none: ParallelCluster's official AMI, on which every new compute node installs the "
            "Neuron packages and builds the driver (DKMS)."
        ),
    )

    @field_validator("custom_ami")
    @classmethod
    def _custom_ami(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"ami-(?:[0-9a-f]{8}|[0-9a-f]{17})", value):
            raise ValueError(f"{value!r} is not an AMI id such as ami-0123456789abcdef0")
        return value

    @field_validator("head_node_instance_type")
    @classmethod
    def _head_node_type(cls, value: str) -> str:
        if not re.fullmatch(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", value):
            raise ValueError("an EC2 instance type such as m7i.xlarge")
        return value

    @field_validator("ssh_key_name")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,255}", value):
            raise ValueError("an EC2 key pair name: 1 to 255 letters, digits, '.', '_' and '-'")
        return value

    @field_validator("ssh_allowed_cidr")
    @classmethod
    def _ssh_cidr(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                check_ingress_cidr("ssh_allowed_cidr", value, example="203.0.113.0/24")
            except ConfigError as error:
                raise ValueError(error.allowed) from None  # pydantic names the field
        return value

    @field_validator("head_node_root_volume_gib")
    @classmethod
    def _head_root(cls, value: int) -> int:
        if not 40 <= value <= GP3_MAX_GIB:
            raise ValueError(f"between 40 and {GP3_MAX_GIB} GiB (gp3; the ParallelCluster AMI needs 40)")
        return value


class InstanceSettings(_Model):
    """The single development instance."""

    instance_type: str = Field("trn1.2xlarge", description="An instance type of the catalog.")
    az_id: AzId | None = Field(None, description="AZ ID; default: the first VPC AZ known to offer the type.")
    root_volume_gib: int = Field(
        defaults.ROOT_VOLUME_GIB, description="Encrypted gp3 root volume, GiB (Neuron asks for 512 or more)."
    )
    dlami: str | None = Field(
        None,
        description="Neuron DLAMI flavour such as multi-framework/ubuntu-24.04 or base/amazon-linux-2023; its image "
        "of the track's Neuron SDK release is found at deploy (by name and description) and kept. Default: the "
        "track's DLAMI (versions.py).",
    )
    ami_id: AmiId | None = Field(
        None, description="AMI to boot instead (of the same OS as dlami); default: the DLAMI found at deploy."
    )
    instance_connect_endpoint: bool = Field(False, description="Add an EC2 Instance Connect endpoint.")
    mount_storage: bool = Field(True, description="Mount the FSx file system at /fsx when storage is deployed.")

    @field_validator("az_id")
    @classmethod
    def _az_id(cls, value: str | None) -> str | None:
        return value if value is None else check_az_id(value)

    @field_validator("root_volume_gib")
    @classmethod
    def _root_volume(cls, value: int) -> int:
        low = defaults.ROOT_VOLUME_GIB
        if not low <= value <= GP3_MAX_GIB:
            raise ValueError(f"between {low} and {GP3_MAX_GIB} GiB (the Neuron setup guides ask for at least {low} GiB)")
        return value

    @field_validator("dlami")
    @classmethod
    def _dlami(cls, value: str | None) -> str | None:
        if value is not None and dlami_name(value) is None:
            raise ValueError(DLAMI_FLAVOUR_RULE)
        return value
