"""FSx for Lustre client tuning of a Trainium node, decided per instance type from the catalog, and the stripe
layout of the shared directories; trainium_cdk/node/lustre_tuning.sh applies both on every backend's nodes.

The settings are the FSx for Lustre user guide's, "Performance tips" ("Recommended client instance tuning for
optimal performance", https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance-tips.html):

- a client with more than 64 GiB of memory: ``ldlm.namespaces.*.lru_max_age=600000`` and
  ``ldlm.namespaces.*.lru_size=<100 x CPUs>`` (lctl set_param);
- a client with more than 64 vCPUs: ``options ptlrpc ptlrpcd_per_cpt_max=32`` and ``options ksocklnd
  credits=2560`` in modprobe configuration (read when the modules load: before the first mount), and, once
  mounted, ``osc.*OST*.max_rpcs_in_flight=32``, ``mdc.*.max_rpcs_in_flight=64`` and
  ``mdc.*.max_mod_rpcs_in_flight=50``.

The guide notes that lctl set_param does not persist across reboots: the node program sets them again after
every mount (a systemd service that follows the mount table). trn1.2xlarge (8 vCPUs, 32 GiB) gets none of it;
trn1.32xlarge and trn1n.32xlarge (128 vCPUs, 512 GiB) and trn2/trn2u.48xlarge (192, 2 TiB) get all of it.

The layout: FSx's progressive file layout example for "workloads that have highly concurrent access on medium
and large files" (FSx user guide, "Striping data in your file system", Progressive file layouts,
https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html#striping-pfl): files up to 100 MiB on one
OST (a stripe count of 1 keeps the small files of a checkpoint, its metadata and logs, from a round trip to
every OST), up to 10 GiB on 8, larger ones on every OST. Checkpoints are written by every rank at once and a
consolidated one is tens of GB; tokenized datasets are read by every rank at once. A file system's default
layout (FSx's, since 2023-08-25: 1, 8, 16, then 32 stripes at 100 MiB, 10 GiB and 100 GiB) stripes the same
up to 10 GiB: the directories' own layout puts larger files on every OST, which counts from 16 OSTs up.
"""

from __future__ import annotations

import base64
import gzip
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from trainium_cdk import node
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.catalog import InstanceSpec
from trainium_cdk.facts.names import CHECKPOINT_ROOT, DATASETS_DIR_NAME, SHARED_MOUNT

SCRIPT = "lustre_tuning.sh"
# The FSx guide's thresholds: "more than 64 GiB of memory", "more than 64 vCPU cores".
MEMORY_THRESHOLD_GIB = 64
VCPU_THRESHOLD = 64
LRU_MAX_AGE_MS = 600_000
LRU_SIZE_PER_CPU = 100
MODULE_OPTIONS = (("ptlrpc", "ptlrpcd_per_cpt_max=32"), ("ksocklnd", "credits=2560"))
RPC_PARAMS = ("osc.*OST*.max_rpcs_in_flight=32", "mdc.*.max_rpcs_in_flight=64", "mdc.*.max_mod_rpcs_in_flight=50")
STRIPE_LAYOUT = ("-E", "100M", "-c", "1", "-E", "10G", "-c", "8", "-E", "-1", "-c", "-1")
# Below the file system's root: /fsx/checkpoints (every backend's TRN_CHECKPOINT_DIR parent) and the datasets.
STRIPED_DIRS = (CHECKPOINT_ROOT.removeprefix(f"{SHARED_MOUNT}/"), DATASETS_DIR_NAME)
# What the program installs on a node (paths of trainium_cdk/node/lustre_tuning.sh, which writes them).
MODPROBE_FILE = "/etc/modprobe.d/trainium-lustre.conf"
TUNER_PATH = "/usr/local/sbin/trainium-lustre-tuning"
SETTINGS_FILE = "/etc/trainium-cdk/lustre-tuning.conf"
SERVICE = "trainium-lustre-tuning"
CLIENT_INSTALLS = ("amazon-linux",)


@dataclass(frozen=True)
class ClientTuning:
    """What a node of one instance type sets: ``module_options`` as (module, option=value) pairs in modprobe
    configuration, before the modules load; ``params`` with lctl set_param after every mount."""

    instance_type: str
    module_options: tuple[tuple[str, str], ...]
    params: tuple[str, ...]

    @property
    def modprobe_lines(self) -> tuple[str, ...]:
        return tuple(f"options {module} {option}" for module, option in self.module_options)


def client_tuning(spec: InstanceSpec) -> ClientTuning:
    """The FSx guide's recommended tuning for ``spec``'s vCPUs and memory (module docstring)."""
    params: list[str] = []
    if spec.memory_gib > MEMORY_THRESHOLD_GIB:
        params += [f"ldlm.namespaces.*.lru_max_age={LRU_MAX_AGE_MS}",
                   f"ldlm.namespaces.*.lru_size={LRU_SIZE_PER_CPU * spec.vcpus}"]
    many_cpus = spec.vcpus > VCPU_THRESHOLD
    if many_cpus:
        params += RPC_PARAMS
    return ClientTuning(spec.name, MODULE_OPTIONS if many_cpus else (), tuple(params))


def tuning_values(spec: InstanceSpec, file_system: str, *, client_install: str | None = None) -> dict[str, str]:
    """The settings lustre_tuning.sh's ``install`` takes. ``file_system`` is the mount point (a host that mounts
    it there) or the FSx mount name (EKS, where each pod's mount has a path of its own; a token works);
    ``client_install`` is set where the host has no Lustre client of its own and others mount (EKS)."""
    if client_install is not None and client_install not in CLIENT_INSTALLS:
        raise ConfigError("client_install", client_install, one_of(CLIENT_INSTALLS))
    tuning = client_tuning(spec)
    values = {
        "LUSTRE_MODULE_OPTIONS": " ".join(f"{module}:{option}" for module, option in tuning.module_options),
        "LUSTRE_TUNING_PARAMS": " ".join(tuning.params),
        "LUSTRE_STRIPE_LAYOUT": " ".join(STRIPE_LAYOUT),
        "LUSTRE_STRIPED_DIRS": " ".join(STRIPED_DIRS),
        "LUSTRE_FILE_SYSTEM": file_system,
    }
    if client_install is not None:
        values["LUSTRE_CLIENT_INSTALL"] = client_install
    return values


def install_args(spec: InstanceSpec, file_system: str = SHARED_MOUNT, *, client_install: str | None = None) -> list[str]:
    """lustre_tuning.sh's arguments: ``install`` and its settings (ParallelCluster's OnNodeStart passes them)."""
    return ["install", *(f"{name}={value}" for name, value in tuning_values(
        spec, file_system, client_install=client_install).items())]


def install_commands(
    spec: InstanceSpec, file_system: str = SHARED_MOUNT, *, client_install: str | None = None
) -> list[str]:
    """User data lines that write lustre_tuning.sh to the node and install it, before the file system is mounted.
    The program goes compressed (gzip, base64): every Batch group's launch template carries it, and 25
    trn2.48xlarge groups fill a template close to CloudFormation's 1 MB (stacks/batch_stack.py)."""
    data = base64.b64encode(gzip.compress(node.source(SCRIPT).encode(), mtime=0)).decode()
    return [
        f"mkdir -p {PurePosixPath(TUNER_PATH).parent}",
        f"echo {data} | base64 -d | gunzip > {TUNER_PATH}",
        f"chmod 755 {TUNER_PATH}",
        shlex.join([TUNER_PATH, *install_args(spec, file_system, client_install=client_install)]),
    ]


def eks_node_script(spec: InstanceSpec, mount_name: str) -> str:
    """The shell part of an EKS Trainium node's user data: the client, its tuning and the layout on the file
    system of FSx mount name ``mount_name``, which the FSx CSI driver mounts wherever a pod needs it."""
    lines = install_commands(spec, mount_name, client_install="amazon-linux")
    return "\n".join(["#!/bin/bash", "set -euo pipefail", *lines]) + "\n"
