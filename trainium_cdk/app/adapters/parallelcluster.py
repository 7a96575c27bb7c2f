"""The ParallelCluster backend's adapter: the config mapped to the cluster configuration's settings and
the SlurmCluster's props. No CDK: ``trn`` and dist/ render the pcluster CLI's YAML with it."""

from __future__ import annotations

from trainium_cdk.app.config import Config
from trainium_cdk.parallelcluster.accounting import SlurmAccount, SlurmAccounting
from trainium_cdk.parallelcluster.configuration import OS_USER, ClusterSettings, HeadNode, NewFileSystem, SlurmQueue
from trainium_cdk.runtime.lustre_tuning import install_args as lustre_tuning_args


def cluster_name(config: Config) -> str:
    """The cluster's name; ParallelCluster needs it to differ from the name of any stack of ours."""
    return f"{config.project}-cluster"


def cluster_settings(config: Config) -> ClusterSettings:
    """What the cluster configuration says about ``config``'s deployment (the ids come from the stack)."""
    settings = config.parallelcluster
    storage = config.storage
    return ClusterSettings(
        region=config.region,
        queues=tuple(
            SlurmQueue(
                nodes=config.group_nodes(group),
                placement_group=group.placement_group,
                custom_ami=settings.custom_ami,
                # Without storage, no Lustre mount to tune.
                lustre_tuning=tuple(lustre_tuning_args(config.spec(group))) if config.storage.enabled else (),
            )
            for group in config.compute_groups
        ),
        head_node=HeadNode(
            instance_type=settings.head_node_instance_type,
            root_volume_gib=settings.head_node_root_volume_gib,
            ssh_allowed_cidr=settings.ssh_allowed_cidr or config.network.cidr,
            ssh_key_name=settings.ssh_key_name,
        ),
        new_file_system=NewFileSystem(
            capacity_gib=storage.capacity_gib,
            deployment_type=storage.deployment_type,
            throughput_mb_per_tib=storage.throughput_mb_per_tib,
            compression=storage.compression,
            removal_policy=storage.removal_policy,
        ),
        track=config.neuron_track,
        tags=(("project", config.project), *sorted(config.tags.items())),
        accounting=slurm_accounting(config),
    )


def slurm_accounting(config: Config) -> SlurmAccounting | None:
    """The teams' Slurm accounts (each team's share and members; the OS user, through which `trn submit` runs
    sbatch, in every one); None without teams: one tenant, no accounting."""
    if not config.teams:
        return None
    return SlurmAccounting(
        accounts=tuple(SlurmAccount(team.name, team.share, team.slurm_users) for team in config.teams),
        submitter=OS_USER,
    )
