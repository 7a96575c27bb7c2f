"""The configuration sections of what runs: EKS training jobs, the data loader, the workloads, and the
pipeline."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from trainium_cdk.app.config.base import _Model
from trainium_cdk.app.config.fields import S3_PREFIX, AccountId, Image, Name, RelativePath, check_environment_name
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import DATA_LOADER_SERVICE_ACCOUNT, DATASETS_DIR_NAME, QUEUE_NAME

# The example image's script; torchrun runs it with python (a command starting with python3 works too).
EXAMPLE_COMMAND = ("/opt/trainium-cdk/examples/mlp/train.py",)


class TrainingJobSettings(_Model):
    """A training job the EKS stack runs (and `make synth` writes to dist/eks/workloads)."""

    name: str = Field(description="Job name, a DNS label of at most 40 characters.")
    group: str | None = Field(None, description="Compute group it runs on; default: the first.")
    nodes: int | None = Field(None, description="Nodes; default: the group's nodes. Above 1: a gang-scheduled job.")
    processes_per_node: int | None = Field(None, description="Processes per node; default: every NeuronCore.")
    command: tuple[str, ...] = Field(
        EXAMPLE_COMMAND, description="Program and arguments as one process runs them (train.py ...); the launcher "
        "runs them under torchrun on every node."
    )
    image: Image | None = Field(None, description="Image; default: workloads.image.")
    cache_set: str | None = Field(
        None, description="Neuron compile cache directory /fsx/neuron-cache/<cache_set>; default: the group's name."
    )
    precompile: bool = Field(
        False, description="First extract and compile the job's graphs (neuron_parallel_compile over "
        "precompile_steps steps, no checkpoint directory), then train."
    )
    precompile_steps: int | None = Field(
        None, strict=True, description="Steps of that graph extraction (TRN_PRECOMPILE_STEPS); default: "
        "neuron.precompile_steps."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment: names of letters, digits and '_', not starting with a digit."
    )
    retries: int = Field(3, description="Restarts of the whole job after a failure.")
    service_account: str | None = Field(
        None, description="EKS: the Kubernetes service account its pods run as (what it may call in AWS, through EKS "
        "Pod Identity); default: none (no credentials, no API token)."
    )
    cpu_only: bool = Field(
        False, description="CPU work on one node (a data preparation), no Neuron device: on EKS a pod on the system "
        "nodes, not a Trainium node; elsewhere a node of its group."
    )

    @field_validator("service_account")
    @classmethod
    def _not_the_loaders(cls, value: str | None) -> str | None:
        # The cluster refuses such a pod too (charts/admission.py); said here before a deploy.
        if value == DATA_LOADER_SERVICE_ACCOUNT:
            raise ValueError("a service account of the job's own: data-loader is the data loader's, whose role reads "
                             "the dataset bucket")
        return value

    @model_validator(mode="after")
    def _env_names(self) -> TrainingJobSettings:
        # Refused here, not at deploy (Kubernetes) or when the launcher's shell exports them.
        for name in self.env:
            try:
                check_environment_name(name)
            except ValueError as err:
                raise ConfigError("env", name, str(err)) from None
        return self


class DataLoaderSettings(_Model):
    """A Job that copies an S3 prefix into the file system (for file systems without a data repository)."""

    s3_uri: str = Field(description="s3://bucket/prefix to copy.")
    path: RelativePath = Field(DATASETS_DIR_NAME, description="Directory under /fsx.")

    @field_validator("s3_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        if not (value.startswith("s3://") and re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket)
                and S3_PREFIX.fullmatch(prefix)):
            raise ValueError("an S3 URI such as s3://my-bucket/datasets/ (the prefix in S3's safe characters)")
        return value

    @property
    def bucket(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key prefix of ``s3_uri`` ("" for a whole bucket)."""
        return self.s3_uri.removeprefix("s3://").partition("/")[2]


class WorkloadSettings(_Model):
    """What runs on the EKS cluster beyond the device plugins."""

    image: Image | None = Field(
        None, description="Training image; default: the MLP example image the EKS stack builds (dist/: ${TRAINING_IMAGE})."
    )
    jobs: tuple[TrainingJobSettings, ...] = Field((), description="Training jobs the stack runs on deploy.")
    volcano: bool = Field(True, description="Install Volcano (gang scheduling, needed by multi-node jobs) and its queue.")
    queue: str = Field(QUEUE_NAME, description="The Volcano queue.")
    data_loader: DataLoaderSettings | None = Field(None, description="Copy an S3 prefix into /fsx.")
    tensorboard: bool = Field(False, description="TensorBoard on the file system's runs/ directory (ClusterIP).")
    shell: bool = Field(False, description="An interactive pod with /fsx mounted.")


class PipelineEnvironment(_Model):
    """One deployment target of the pipeline: an account in the config's region."""

    name: Name = Field(description="Stage name, such as dev or prod.")
    account: AccountId = Field(description="12-digit AWS account id, bootstrapped to trust the pipeline account.")
    manual_approval: bool = Field(False, description="Wait for a manual approval in the pipeline before this stage.")


class PipelineSettings(_Model):
    """CDK Pipelines deployment (`cdk synth -c pipeline=true`): a self-mutating pipeline in CodePipeline."""

    repository: str = Field(description="Source repository as owner/name.")
    account: AccountId = Field(description="12-digit AWS account id of the pipeline itself (stages trust it).")
    branch: str = Field("main", description="Branch that triggers the pipeline.")
    connection_arn: str = Field(description="ARN of the CodeConnections connection to the repository.")
    environments: tuple[PipelineEnvironment, ...] = Field(description="Stages in order, each an account.")

    @field_validator("repository")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not re.fullmatch(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", value):
            raise ValueError("owner/name of the repository")
        return value

    @field_validator("connection_arn")
    @classmethod
    def _connection(cls, value: str) -> str:
        if not re.fullmatch(r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:[0-9]{12}:connection/.+$", value):
            raise ValueError("a CodeConnections connection ARN (arn:aws:codeconnections:REGION:ACCOUNT:connection/ID)")
        return value

    @field_validator("environments")
    @classmethod
    def _environments(cls, value: tuple[PipelineEnvironment, ...]) -> tuple[PipelineEnvironment, ...]:
        names = [e.name for e in value]
        if not value or len(set(names)) != len(names):
            raise ValueError("at least one environment, each name once")
        return value
