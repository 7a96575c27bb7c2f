"""FsxStorage: a StorageClass for FSx for Lustre and, for an existing file system, a bound claim.

The claim (:attr:`FsxStorage.claim_name`) is what training jobs mount: datasets, checkpoints and the
Neuron compile cache. The FSx CSI driver (EKS add-on aws-fsx-csi-driver) must be installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from cdk8s import ApiObject, Chart
from constructs import Construct

from trainium_cdk.charts._k8s import (
    CHART_LABELS,
    api_object,
    check_choice,
    check_name,
    check_not_number_token,
    is_token,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import (
    LUSTRE_COMPRESSION_TYPES,
    LUSTRE_MIN_CAPACITY_GIB,
    LUSTRE_THROUGHPUT_MB_PER_TIB,
    LUSTRE_VERSIONS,
)
from trainium_cdk.facts.names import CLAIM_NAME, STORAGE_CLASS_NAME, TRAINING_NAMESPACE, VOLUME_NAME

PROVISIONER = "fsx.csi.aws.com"
# What FSx accepts is a catalog fact; the config checks against the same tuples.
DEPLOYMENT_TYPES: tuple[str, ...] = tuple(LUSTRE_THROUGHPUT_MB_PER_TIB)
COMPRESSION_TYPES: tuple[str, ...] = LUSTRE_COMPRESSION_TYPES
RECLAIM_POLICIES = ("Retain", "Delete")

# The config's defaults too (tests/unit/charts/test_chart_fsx_storage.py holds them together).
DEFAULT_DEPLOYMENT_TYPE = "PERSISTENT_2"
DEFAULT_THROUGHPUT_MB_PER_TIB = 250
DEFAULT_LUSTRE_VERSION = LUSTRE_VERSIONS[0]
DEFAULT_COMPRESSION = "LZ4"
DEFAULT_CAPACITY_GIB = LUSTRE_MIN_CAPACITY_GIB
DEFAULT_RECLAIM_POLICY = "Retain"
DEFAULT_STORAGE_CLASS_NAME = STORAGE_CLASS_NAME
DEFAULT_VOLUME_NAME = VOLUME_NAME
DEFAULT_CLAIM_NAME = CLAIM_NAME
DEFAULT_NAMESPACE = TRAINING_NAMESPACE
# Without flock a Lustre client fails flock()/fcntl() locks, which checkpoint writers and the compile cache take.
MOUNT_OPTIONS = ("flock",)
_RWX = ["ReadWriteMany"]


class FsxStorage(Chart):
    """An FSx for Lustre StorageClass, plus a static PersistentVolume and its claim when
    ``file_system_id`` names an existing file system.

    Only ``subnet_id``, ``security_group_ids``, ``file_system_id``, ``dns_name``, ``mount_name`` and
    ``capacity_gib`` may be CDK tokens; the other props are synth-time choices. The chart builds no
    CDK expression: pass string tokens (``Fn.join(",", ids)`` for a list token of security groups,
    ``Token.as_string(n)`` for a number token).

    :param subnet_id: subnet of dynamically provisioned file systems.
    :param security_group_ids: their security groups (open on the Lustre ports): a list of ids, or
        one comma-separated string.
    :param deployment_type: PERSISTENT_2 or SCRATCH_2. Default: PERSISTENT_2.
    :param throughput_mb_per_tib: PERSISTENT_2 throughput per TiB (125, 250, 500, 1000).
        Default: 250 for PERSISTENT_2, none for SCRATCH_2 (which accepts none).
    :param lustre_version: ``fileSystemTypeVersion``. Default: 2.15.
    :param compression: ``dataCompressionType``, LZ4 or NONE. Default: LZ4.
    :param reclaim_policy: what deleting a dynamic claim does to its file system, Retain or Delete.
        Default: Retain.
    :param storage_class_name: Default: ``fsx-lustre``.
    :param file_system_id: an existing file system (fs-...) to expose as a static volume. Default: none.
    :param dns_name: its DNS name; required with ``file_system_id``. Default: none.
    :param mount_name: its Lustre mount name; required with ``file_system_id``. Default: none.
    :param capacity_gib: its storage capacity, GiB (an int, or a string token). Default: 1200.
    :param volume_name: name of the static PersistentVolume. Default: ``fsx-lustre-static``.
    :param claim_name: name of the claim bound to it. Default: ``fsx-lustre``.
    :param namespace: namespace of the claim (the namespace of the jobs). Default: ``training``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        subnet_id: str,
        security_group_ids: Sequence[str] | str,
        deployment_type: str = DEFAULT_DEPLOYMENT_TYPE,
        throughput_mb_per_tib: int | None = None,
        lustre_version: str = DEFAULT_LUSTRE_VERSION,
        compression: str = DEFAULT_COMPRESSION,
        reclaim_policy: str = DEFAULT_RECLAIM_POLICY,
        storage_class_name: str = DEFAULT_STORAGE_CLASS_NAME,
        file_system_id: str | None = None,
        dns_name: str | None = None,
        mount_name: str | None = None,
        capacity_gib: int | str = DEFAULT_CAPACITY_GIB,
        volume_name: str = DEFAULT_VOLUME_NAME,
        claim_name: str = DEFAULT_CLAIM_NAME,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        field = type(self).__name__
        check_choice(f"{field}.deployment_type", deployment_type, DEPLOYMENT_TYPES)
        check_choice(f"{field}.lustre_version", lustre_version, LUSTRE_VERSIONS)
        check_choice(f"{field}.compression", compression, COMPRESSION_TYPES)
        check_choice(f"{field}.reclaim_policy", reclaim_policy, RECLAIM_POLICIES)
        for name, value in (("storage_class_name", storage_class_name), ("volume_name", volume_name),
                            ("claim_name", claim_name), ("namespace", namespace)):
            check_name(f"{field}.{name}", value)
        throughput = _throughput(field, deployment_type, throughput_mb_per_tib)
        sg_ids = _security_group_ids(field, security_group_ids)
        _check_file_system(field, file_system_id, dns_name, mount_name, capacity_gib)
        super().__init__(scope, id, labels=CHART_LABELS)

        parameters = {
            "subnetId": subnet_id,
            "securityGroupIds": sg_ids,
            "deploymentType": deployment_type,
            "fileSystemTypeVersion": lustre_version,
            "dataCompressionType": compression,
        }
        if throughput is not None:
            # StorageClass parameters are strings.
            parameters["perUnitStorageThroughput"] = str(throughput)
        self.storage_class_name = storage_class_name
        self.storage_class = api_object(
            self, "StorageClass", api_version="storage.k8s.io/v1", kind="StorageClass", name=storage_class_name,
            provisioner=PROVISIONER,
            parameters=parameters,
            mountOptions=list(MOUNT_OPTIONS),
            reclaimPolicy=reclaim_policy,
            # FSx creates a file system in the subnet given above, whatever node the pod lands on.
            volumeBindingMode="Immediate",
        )

        self.claim_name: str | None = None
        self.volume: ApiObject | None = None
        self.claim: ApiObject | None = None
        if file_system_id is not None:
            self._static_volume(file_system_id, dns_name, mount_name, capacity_gib, volume_name, claim_name, namespace)


    def _static_volume(self, file_system_id: str, dns_name: str | None, mount_name: str | None,
                       capacity_gib: int | str, volume_name: str, claim_name: str, namespace: str) -> None:
        """The file system as a volume (never deleted with it: this chart does not own it) and the claim bound to it."""
        capacity = {"storage": f"{capacity_gib}Gi"}
        self.volume = api_object(
            self, "PersistentVolume", api_version="v1", kind="PersistentVolume", name=volume_name,
            spec={
                "capacity": capacity,
                "volumeMode": "Filesystem",
                "accessModes": _RWX,
                "mountOptions": list(MOUNT_OPTIONS),
                # Never Delete: for a CSI volume that would make the driver delete the file system,
                # which this stack does not own.
                "persistentVolumeReclaimPolicy": "Retain",
                # "" keeps the StorageClass above (and any default class) from provisioning a new one.
                "storageClassName": "",
                "csi": {
                    "driver": PROVISIONER,
                    "volumeHandle": file_system_id,
                    "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
                },
            },
        )
        self.claim = api_object(
            self, "PersistentVolumeClaim", api_version="v1", kind="PersistentVolumeClaim", name=claim_name,
            namespace=namespace,
            spec={
                "accessModes": _RWX,
                # "" as on the volume: otherwise the default StorageClass admission fills in a class
                # and the claim never binds to the static volume.
                "storageClassName": "",
                "volumeName": volume_name,
                "resources": {"requests": capacity},
            },
        )
        self.claim_name = claim_name


@dataclass(frozen=True)
class FsxStorageProps:
    """The props of :class:`FsxStorage`, for :func:`trainium_cdk.charts.cluster_charts`; :meth:`of` a file
    system."""

    subnet_id: str
    security_group_ids: Sequence[str] | str
    deployment_type: str = DEFAULT_DEPLOYMENT_TYPE
    throughput_mb_per_tib: int | None = None
    lustre_version: str = DEFAULT_LUSTRE_VERSION
    compression: str = DEFAULT_COMPRESSION
    reclaim_policy: str = DEFAULT_RECLAIM_POLICY
    storage_class_name: str = DEFAULT_STORAGE_CLASS_NAME
    file_system_id: str | None = None
    dns_name: str | None = None
    mount_name: str | None = None
    capacity_gib: int | str = DEFAULT_CAPACITY_GIB
    volume_name: str = DEFAULT_VOLUME_NAME
    claim_name: str = DEFAULT_CLAIM_NAME
    namespace: str = DEFAULT_NAMESPACE

    def as_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, file_system: LustreFileSystem, *, subnet_id: str, security_group_id: str) -> FsxStorageProps:
        """The props of one file system (a ``LustreStorage``, or what dist/ knows of it with placeholders for
        its ids), its dynamic volumes in ``subnet_id``, reached through ``security_group_id``: the one mapping."""
        return cls(
            subnet_id=subnet_id,
            security_group_ids=[security_group_id],
            deployment_type=file_system.deployment_type,
            throughput_mb_per_tib=file_system.throughput_mb_per_tib,
            lustre_version=file_system.lustre_version,
            compression=file_system.compression,
            file_system_id=file_system.file_system_id,
            dns_name=file_system.dns_name,
            mount_name=file_system.mount_name,
            capacity_gib=file_system.capacity_gib,
        )


class LustreFileSystem(Protocol):
    """What the charts need to know of an FSx for Lustre file system (FSx API values; ids may be tokens or
    placeholders). ``LustreStorage`` is one."""

    @property
    def deployment_type(self) -> str: ...
    @property
    def throughput_mb_per_tib(self) -> int | None: ...
    @property
    def lustre_version(self) -> str: ...
    @property
    def compression(self) -> str: ...
    @property
    def capacity_gib(self) -> int: ...
    @property
    def file_system_id(self) -> str: ...
    @property
    def dns_name(self) -> str: ...
    @property
    def mount_name(self) -> str: ...


def _throughput(field: str, deployment_type: str, throughput: int | None) -> int | None:
    """perUnitStorageThroughput exists for PERSISTENT_* only; SCRATCH_2 must not carry one."""
    check_not_number_token(f"{field}.throughput_mb_per_tib", throughput)
    if is_token(deployment_type) or is_token(throughput):
        return throughput
    offered = LUSTRE_THROUGHPUT_MB_PER_TIB[deployment_type]
    if not offered:
        if throughput is not None:
            raise ConfigError(
                f"{field}.throughput_mb_per_tib", throughput, f"{deployment_type} has a fixed throughput: leave it out"
            )
        return None
    throughput = DEFAULT_THROUGHPUT_MB_PER_TIB if throughput is None else throughput
    check_choice(f"{field}.throughput_mb_per_tib", throughput, offered)
    return throughput


def _check_file_system(
    field: str, file_system_id: str | None, dns_name: str | None, mount_name: str | None, capacity_gib: int | str
) -> None:
    if file_system_id is None:
        if dns_name is not None or mount_name is not None:
            raise ConfigError(f"{field}.file_system_id", None, "required with dns_name and mount_name")
        return
    for name, value in (("dns_name", dns_name), ("mount_name", mount_name)):
        if value is None:
            raise ConfigError(f"{field}.{name}", None, "required with file_system_id")
    if not is_token(file_system_id) and not str(file_system_id).startswith("fs-"):
        raise ConfigError(f"{field}.file_system_id", file_system_id, "a file system id such as fs-0123456789abcdef0")
    check_not_number_token(f"{field}.capacity_gib", capacity_gib)
    if not is_token(capacity_gib) and (not isinstance(capacity_gib, int) or capacity_gib < 1):
        raise ConfigError(f"{field}.capacity_gib", capacity_gib, "a positive number of GiB")


def _security_group_ids(field: str, ids: Sequence[str] | str) -> str:
    """The comma-separated list the driver expects; a single string (or token) is taken as it is."""
    if isinstance(ids, str):
        return ids
    if is_token(ids):
        # A list token cannot be joined in Python: only CloudFormation can, at deploy time.
        raise ConfigError(
            f"{field}.security_group_ids", ids, 'a list of ids or one string: pass Fn.join(",", ids) for a list token'
        )
    ids = list(ids)
    if not ids:
        raise ConfigError(f"{field}.security_group_ids", ids, "at least one security group id (sg-...)")
    return ",".join(ids)
