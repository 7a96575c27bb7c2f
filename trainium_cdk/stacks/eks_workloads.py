"""What trains on the EKS cluster: the adapter from the ``workloads`` section to TrainingWorkloads."""

from __future__ import annotations

from trainium_cdk.config import Config
from trainium_cdk.constructs.eks_workloads import TrainingWorkloadsOptions
from trainium_cdk.workloads import workload_charts


def workloads_options(config: Config) -> TrainingWorkloadsOptions:
    """Volcano, the example image on the configured Neuron track, the data loader's bucket, and the
    configured workload charts (the ones ``make synth`` writes to dist/, with the image's URI)."""
    workloads = config.workloads
    loader = workloads.data_loader
    return TrainingWorkloadsOptions(
        charts=lambda app, image: workload_charts(app, config, image=image),
        volcano=workloads.volcano,
        data_loader_bucket=loader.bucket if loader is not None else None,
        base_image_tag=config.neuron_track.training_image_tag,
    )
