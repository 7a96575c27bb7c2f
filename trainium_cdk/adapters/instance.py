"""The development instance backend's adapter: the config mapped to DevInstance's props."""

from __future__ import annotations

from dataclasses import dataclass

from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.config import Config
from trainium_cdk.versions import NeuronTrack


@dataclass(frozen=True)
class DevInstanceProps:
    """DevInstance's props of one deployment (see DevInstance for each); ``az_id`` picks its subnet and
    ``mount_storage`` whether the stack gives it the file system."""

    spec: InstanceSpec
    az_id: str
    dlami: str | None
    root_volume_gib: int
    instance_connect_endpoint: bool
    mount_storage: bool
    track: NeuronTrack
    ami_id: str | None


def dev_instance_props(config: Config) -> DevInstanceProps:
    settings = config.instance
    return DevInstanceProps(
        spec=config.catalog.get(settings.instance_type, field="instance.instance_type"),
        # The config checked that the AZ is one of the VPC's and offers the type.
        az_id=config.dev_instance_az_id(),
        dlami=settings.dlami,
        root_volume_gib=settings.root_volume_gib,
        instance_connect_endpoint=settings.instance_connect_endpoint,
        mount_storage=settings.mount_storage,
        track=config.neuron_track,
        ami_id=settings.ami_id,
    )
