"""Validate ParallelCluster cluster configurations offline, with ParallelCluster's own code.

Runs inside the aws-parallelcluster virtual environment (.venv-pcluster: the package pins CDK v1 and
constructs 3, so it never shares an environment with the project), as a subprocess:

    .venv-pcluster/bin/python tools/pcluster_validate.py < request.json

Request: a JSON list of {"name": cluster name, "config": cluster configuration}. Answer: a JSON
list, one {"errors": [...], "warnings": [...]} per request item, each message "Path.To.Key: text".

What runs: the marshmallow schema (ClusterSchema(cluster_name=...).load: types, ranges, required
and unknown keys) and the validators that need no AWS account (names, node counts, EFA placement
groups, duplicates, custom Slurm settings against ParallelCluster's deny-lists, the accounting database's URI). The others describe instance types, subnets and file systems through AWS: they
run at `pcluster create-cluster` or in the custom resource, not here. Every AWS call is refused
before it leaves the process, so a validator this list forgets fails loudly instead of hanging.
"""

from __future__ import annotations

import json
import sys

from _pcluster_offline import flatten  # noqa: E402  (first: it cuts AWS off)
from marshmallow import ValidationError  # noqa: E402
from pcluster.config.common import CapacityType  # noqa: E402
from pcluster.constants import (  # noqa: E402
    MAX_COMPUTE_RESOURCES_PER_QUEUE,
    MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER,
    MAX_NUMBER_OF_QUEUES,
)
from pcluster.schemas.cluster_schema import ClusterSchema  # noqa: E402
from pcluster.validators.cluster_validators import (  # noqa: E402
    ClusterNameValidator,
    ComputeResourceSizeValidator,
    DuplicateMountDirValidator,
    DuplicateNameValidator,
    EfaPlacementGroupValidator,
    MaxCountValidator,
    NameValidator,
    SharedStorageMountDirValidator,
    SharedStorageNameValidator,
)
from pcluster.validators.database_validators import DatabaseUriValidator  # noqa: E402
from pcluster.validators.slurm_settings_validator import (  # noqa: E402
    SLURM_SETTINGS_DENY_LIST,
    CustomSlurmNodeNamesValidator,
    CustomSlurmSettingLevel,
    CustomSlurmSettingsValidator,
)


def _offline_validators(cluster, name):  # noqa: ANN001
    """(where, validator, arguments) of every validator that needs no AWS call, as ParallelCluster
    registers them (pcluster/config/cluster_config.py)."""
    queues = cluster.scheduling.queues
    yield "Name", ClusterNameValidator, {"name": name, "scheduling": cluster.scheduling}
    yield "Scheduling.SlurmQueues", DuplicateNameValidator, {"name_list": [q.name for q in queues], "resource_name": "Queue"}
    yield "Scheduling.SlurmQueues", MaxCountValidator, {
        "resources_length": len(queues), "max_length": MAX_NUMBER_OF_QUEUES, "resource_name": "SlurmQueues",
    }
    yield "Scheduling.SlurmQueues", MaxCountValidator, {
        "resources_length": sum(len(q.compute_resources) for q in queues),
        "max_length": MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER,
        "resource_name": "ComputeResources per Cluster",
    }
    for i, queue in enumerate(queues):
        where = f"Scheduling.SlurmQueues.{i}"
        yield f"{where}.Name", NameValidator, {"name": queue.name}
        yield f"{where}.ComputeResources", DuplicateNameValidator, {
            "name_list": [cr.name for cr in queue.compute_resources], "resource_name": "Compute resource",
        }
        yield f"{where}.ComputeResources", MaxCountValidator, {
            "resources_length": len(queue.compute_resources),
            "max_length": MAX_COMPUTE_RESOURCES_PER_QUEUE,
            "resource_name": "ComputeResources per Queue",
        }
        capacity_type = queue.capacity_type or CapacityType.ONDEMAND
        for j, resource in enumerate(queue.compute_resources):
            at = f"{where}.ComputeResources.{j}"
            yield f"{at}.Name", NameValidator, {"name": resource.name}
            yield at, ComputeResourceSizeValidator, {
                "min_count": resource.min_count, "max_count": resource.max_count, "capacity_type": capacity_type,
            }
            chosen = queue.get_chosen_placement_group_setting_for_compute_resource(resource)
            yield f"{where}.Networking.PlacementGroup", EfaPlacementGroupValidator, {
                "efa_enabled": resource.efa.enabled,
                "placement_group_key": queue.get_placement_group_settings_for_compute_resource(resource).get("key"),
                "placement_group_disabled": chosen.enabled is False,
                "multi_az_enabled": len(queue.networking.subnet_ids) > 1,
                "capacity_type": capacity_type,
                "queue_name": queue.name,
            }
    # SlurmSettings as SlurmSettings._register_validators registers them: the custom settings against ParallelCluster's
    # deny-lists (the accounting one too when a database is given), and the database's URI.
    settings = cluster.scheduling.settings
    custom = settings.custom_slurm_settings or []
    at = "Scheduling.SlurmSettings"
    if custom:
        deny = SLURM_SETTINGS_DENY_LIST["SlurmConf"]
        yield f"{at}.CustomSlurmSettings", CustomSlurmSettingsValidator, {
            "custom_settings": custom, "deny_list": deny["Global"], "settings_level": CustomSlurmSettingLevel.SLURM_CONF,
        }
        yield f"{at}.CustomSlurmSettings", CustomSlurmNodeNamesValidator, {"custom_settings": custom}
        if settings.database:
            yield f"{at}.CustomSlurmSettings", CustomSlurmSettingsValidator, {
                "custom_settings": custom, "deny_list": deny["Accounting"],
                "settings_level": CustomSlurmSettingLevel.SLURM_CONF,
            }
    if settings.database and settings.database.uri:
        yield f"{at}.Database.Uri", DatabaseUriValidator, {"uri": settings.database.uri}
    storages = cluster.shared_storage or []
    yield "SharedStorage", DuplicateNameValidator, {"name_list": [s.name for s in storages], "resource_name": "Shared Storage"}
    yield "SharedStorage", DuplicateMountDirValidator, {
        "shared_storage_name_mount_dir_tuple_list": [(s.name, s.mount_dir) for s in storages],
        "local_mount_dir_instance_types_dict": {},
    }
    for i, storage in enumerate(storages):
        yield f"SharedStorage.{i}.Name", SharedStorageNameValidator, {"name": storage.name}
        yield f"SharedStorage.{i}.MountDir", SharedStorageMountDirValidator, {"mount_dir": storage.mount_dir}


def validate(name: str, config: dict) -> dict[str, list[str]]:
    try:
        cluster = ClusterSchema(cluster_name=name).load(config)
    except ValidationError as err:
        return {"errors": sorted(flatten(err.messages)), "warnings": []}
    errors: list[str] = []
    warnings: list[str] = []
    for where, validator, arguments in _offline_validators(cluster, name):
        for failure in validator().execute(**arguments):
            (errors if failure.level.name == "ERROR" else warnings).append(f"{where}: {failure.message}")
    return {"errors": errors, "warnings": warnings}


def main() -> None:
    requests = json.load(sys.stdin)
    json.dump([validate(item["name"], item["config"]) for item in requests], sys.stdout)


if __name__ == "__main__":
    main()
