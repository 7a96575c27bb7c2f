"""Time to first step: a model, per backend, of the minutes from "a job is submitted to capacity that is not
running yet" to its first training step, from documented figures (each with its source; an estimate says so),
and the cut EKS makes (FastImagePull and the image pre-pull of ``eks_user_data``), shown as the model's terms
with the cut on and off. ``make docs`` writes :func:`block` into docs/concepts/launcher.md; tests/unit/facts/test_first_step.py checks
the sums, the block and that the pre-pull term drops when the synthesized node user data pre-pulls.

Not a measurement: no Trainium node was timed for it. The terms:

- boot: EC2 launch to the OS running user data;
- drivers: the Neuron driver (DKMS build), EFA and Lustre client installs a node does at boot;
- join: what a node does after boot before a job's process can start there (EKS: nodeadm, kubelet, the device
  plugins advertising NeuronCores and EFA, the pod scheduled; ParallelCluster: its node bootstrap);
- image pull: the training image's size over the pull's effective rate (the slower of the pull engine and the
  node's network), less what a pre-pull started at boot has done by then;
- FSx mount: mounting /fsx (the client already installed);
- compile, on top: Neuron's compile of the training graphs, cold (JIT, or precompiled with TRN_PRECOMPILE=1) or
  warm (the graphs in the /fsx cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainium_cdk.facts.catalog import DEFAULT_CATALOG

BEGIN = "<!-- first-step:begin (generated from trainium_cdk/app/first_step.py by `make docs`; tests/unit/facts/test_first_step.py checks it) -->"
END = "<!-- first-step:end -->"


@dataclass(frozen=True)
class Figure:
    """One documented number the model uses."""

    value: float
    unit: str
    source: str
    estimate: bool = False

    def cited(self) -> str:
        return f"{self.source} (estimate)" if self.estimate else self.source


# -- the figures ---------------------------------------------------------------------------------------------

BOOT = Figure(60, "s", "EC2 launch to user data: about a minute for a Nitro instance from an EBS-backed AMI",
              estimate=True)
# The EKS accelerated AMI (AL2023_x86_64_NEURON) carries the Neuron driver and the EFA driver: nothing to build.
EKS_DRIVERS = Figure(0, "s", "EKS user guide, \"Use EKS-optimized accelerated AMIs\": they include the kernel "
                     "modules and drivers Trainium instances need")
# ParallelCluster's official Ubuntu AMI installs the track's Neuron packages at OnNodeConfigured
# (node/neuron_setup.sh), aws-neuronx-dkms building the driver against the node's kernel.
DKMS_DRIVERS = Figure(300, "s", "node/neuron_setup.sh at every scale-up: Neuron packages, the "
                      "aws-neuronx-dkms build", estimate=True)
# Batch's ECS-optimized AL2023 Neuron AMI has a driver: node/batch_node.sh installs the track's only when the AMI
# carries another version, and the EFA kernel module when missing.
BATCH_DRIVERS = Figure(120, "s", "node/batch_node.sh: the EFA module, and the track's driver when the ECS Neuron "
                       "AMI carries another", estimate=True)
# A ParallelCluster image built with `trn`'s build-image configuration carries the built driver
# (parallelcluster/image.py): scale-up installs nothing.
CUSTOM_AMI_DRIVERS = Figure(0, "s", "parallelcluster.custom_ami from the build-image configuration: the pinned "
                            "packages are on the image")
EKS_JOIN = Figure(60, "s", "nodeadm, kubelet registration, VPC CNI, Neuron and EFA device plugins, scheduling "
                  "of the waiting pod", estimate=True)
BATCH_JOIN = Figure(30, "s", "ECS agent registration and Batch placement", estimate=True)
PCLUSTER_JOIN = Figure(240, "s", "ParallelCluster compute node bootstrap (cookbook, slurmd) before "
                       "OnNodeConfigured", estimate=True)
# "Standard Docker image pulls of 15-20 GB can take 4-6 minutes per instance" (AWS Machine Learning Blog,
# "Reducing container cold start times using SOCI index on DLAMI and DLC", 2026): 17.5 GB in 5 minutes.
PULL_RATE = Figure(17.5 / 300, "GB/s", "AWS Machine Learning Blog, \"Reducing container cold start times using "
                   "SOCI index on DLAMI and DLC\": 15-20 GB in 4-6 minutes with a standard pull")
# The Neuron DLC is one of the images that blog measures; we take the low end of its range.
IMAGE_GB = Figure(15, "GB", "the same blog's 15-20 GB for Deep Learning Containers, low end", estimate=True)
# SOCI parallel pull without a SOCI index: "14-50% faster than Docker" on AL2 and AL2023 with images of 20 GB+
# (awslabs/soci-snapshotter, parallel-pull fallback change f1fcd05, 2026-04); the middle of that range.
FAST_PULL_FACTOR = Figure(0.7, "x", "awslabs/soci-snapshotter f1fcd05: parallel pull 14-50% faster than a "
                          "standard pull for images of 20 GB+; 30% taken", estimate=True)
FSX_MOUNT = Figure(10, "s", "a Lustre mount of an existing file system, the client installed", estimate=True)
# Batch's ECS hosts install the Lustre client from user data first (node/lustre_client.sh, dnf).
FSX_CLIENT_MOUNT = Figure(60, "s", "node/lustre_client.sh: dnf install lustre-client, then the mount", estimate=True)
# Neuron's BERT-large pretraining tutorial (torch-neuronx, "Hugging Face BERT Pretraining Tutorial"): "it takes ~13
# minutes to compile the BERT-Large model training step using the pre-compilation script (compare to ~40 minute if
# not using the pre-compilation script)". The project's MLP and BERT examples, not a Llama: larger models compile
# longer, which makes the warm cache worth more.
BERT_TUTORIAL = "Neuron docs, Hugging Face BERT Pretraining Tutorial (torch-neuronx), BERT-large phase 1"
COMPILE_JIT = Figure(2400, "s", f"{BERT_TUTORIAL}: ~40 minutes without the pre-compilation")
COMPILE_PRECOMPILED = Figure(780, "s", f"{BERT_TUTORIAL}: ~13 minutes with neuron_parallel_compile")
COMPILE_WARM = Figure(60, "s", "Neuron Persistent Cache: graphs found in the cache (/fsx) are loaded, not "
                      "compiled; loading the NEFFs", estimate=True)
# The three ways a first step meets the compiler: JIT compiles in the run, TRN_PRECOMPILE=1 extracts and
# compiles in parallel first (launcher.sh), a warm cache has the graphs already.
COMPILES = {"cold, JIT": COMPILE_JIT, "cold, TRN_PRECOMPILE=1": COMPILE_PRECOMPILED, "warm /fsx cache": COMPILE_WARM}


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float
    how: str


@dataclass(frozen=True)
class Startup:
    """The model's terms for one backend and one set of choices, up to the job's processes starting; the compile
    comes on top (:meth:`first_step`)."""

    backend: str
    label: str
    terms: tuple[Term, ...]

    @property
    def seconds(self) -> float:
        """Submit to the job's processes starting on the new node(s)."""
        return sum(term.seconds for term in self.terms)

    def first_step(self, compile_case: str) -> float:
        """Submit to the first step: the terms, then the compile of ``compile_case`` (a key of COMPILES)."""
        return self.seconds + COMPILES[compile_case].value

    def term(self, name: str) -> Term:
        (found,) = [t for t in self.terms if t.name == name]
        return found


def pull_seconds(image_gb: float, network_gbps: float, *, fast_pull: bool) -> float:
    """The image pull's time: the size over the slower of the pull engine and the node's network (GB/s), the
    engine's time times FAST_PULL_FACTOR with FastImagePull."""
    engine = PULL_RATE.value / (FAST_PULL_FACTOR.value if fast_pull else 1)
    return image_gb / min(engine, network_gbps / 8)


def _term(name: str, figure: Figure) -> Term:
    return Term(name, figure.value, figure.cited())


def eks(*, fast_pull: bool, prepull: bool, instance_type: str = "trn1.32xlarge", image_gb: float = IMAGE_GB.value) -> Startup:
    """EKS: the Neuron AMI (no driver build), join, the pull, the CSI mount. A pull started at boot runs through
    the join; what is left of it then is what the pod waits for."""
    pull = pull_seconds(image_gb, DEFAULT_CATALOG.get(instance_type).network_gbps, fast_pull=fast_pull)
    waited = max(0.0, pull - EKS_JOIN.value) if prepull else pull
    how = f"{image_gb:g} GB in {pull:.0f} s" + (" with FastImagePull" if fast_pull else "") + (
        f", started at boot: {min(pull, EKS_JOIN.value):.0f} s of it during the join" if prepull else "")
    label = " + ".join([*(["FastImagePull"] if fast_pull else []), *(["pre-pull"] if prepull else [])]) or "neither cut"
    return Startup("eks", label, (
        _term("boot", BOOT), _term("drivers", EKS_DRIVERS), _term("join", EKS_JOIN),
        Term("image pull", waited, how), _term("FSx mount", FSX_MOUNT),
    ))


def batch(*, instance_type: str = "trn1.32xlarge", image_gb: float = IMAGE_GB.value) -> Startup:
    """AWS Batch: the ECS AMI installs the drivers at boot, ECS pulls the image with a standard pull."""
    pull = pull_seconds(image_gb, DEFAULT_CATALOG.get(instance_type).network_gbps, fast_pull=False)
    return Startup("batch", "ECS AMI", (
        _term("boot", BOOT), _term("drivers", BATCH_DRIVERS), _term("join", BATCH_JOIN),
        Term("image pull", pull, f"{image_gb:g} GB, standard pull"), _term("FSx mount", FSX_CLIENT_MOUNT),
    ))


def parallelcluster(*, custom_ami: bool) -> Startup:
    """ParallelCluster: no container (the venv on /home); the drivers at OnNodeConfigured unless the image has them."""
    return Startup("parallelcluster", "custom AMI" if custom_ami else "official AMI", (
        _term("boot", BOOT), _term("drivers", CUSTOM_AMI_DRIVERS if custom_ami else DKMS_DRIVERS),
        _term("join", PCLUSTER_JOIN), Term("image pull", 0, "no container: the Neuron venv on the shared /home"),
        _term("FSx mount", FSX_MOUNT),
    ))


def instance() -> Startup:
    """The development instance runs already, on the DLAMI, with /fsx mounted: only the compile is left."""
    return Startup("instance", "running", (
        Term("boot", 0, "the instance runs already (booted once, with the stack)"),
        Term("drivers", 0, "the Neuron DLAMI carries the driver and the PyTorch Neuron environment"),
        Term("join", 0, "no scheduler"),
        Term("image pull", 0, "no container"),
        Term("FSx mount", 0, "mounted at boot (fstab)"),
    ))


def paths() -> list[Startup]:
    """Every row of the table: EKS without and with each cut, then the other backends."""
    return [
        eks(fast_pull=False, prepull=False), eks(fast_pull=True, prepull=False), eks(fast_pull=True, prepull=True),
        batch(), parallelcluster(custom_ami=False), parallelcluster(custom_ami=True), instance(),
    ]


NAMES = ("boot", "drivers", "join", "image pull", "FSx mount")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def table(rows: Sequence[Startup]) -> str:
    """The paths as a Markdown table: minutes per term, to the job's start, and to the first step per compile."""
    head = [*NAMES, "job starts", *(f"first step, {case}" for case in COMPILES)]
    out = ["| backend | case | " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(head)]
    for row in rows:
        cells = [_minutes(row.term(name).seconds) for name in NAMES] + [_minutes(row.seconds)]
        cells += [f"**{_minutes(row.first_step(case))}**" for case in COMPILES]
        out.append(f"| {row.backend} | {row.label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


FIGURES = {
    "boot": BOOT, "EKS drivers": EKS_DRIVERS, "Batch drivers": BATCH_DRIVERS, "ParallelCluster drivers": DKMS_DRIVERS,
    "ParallelCluster custom AMI": CUSTOM_AMI_DRIVERS, "EKS join": EKS_JOIN, "Batch join": BATCH_JOIN,
    "ParallelCluster join": PCLUSTER_JOIN, "standard pull rate": PULL_RATE, "training image size": IMAGE_GB,
    "FastImagePull factor": FAST_PULL_FACTOR, "FSx mount": FSX_MOUNT, "Batch FSx client and mount": FSX_CLIENT_MOUNT,
    **{f"compile, {case}": figure for case, figure in COMPILES.items()},
}


def sources() -> str:
    lines = ["| figure | value | source |", "|---|---|---|"]
    for name, figure in FIGURES.items():
        value = f"{figure.value:.3f}" if figure.unit == "GB/s" else f"{figure.value:g}"
        lines.append(f"| {name} | {value} {figure.unit} | {figure.cited()} |")
    return "\n".join(lines)


def block() -> str:
    """The docs block: the table (minutes; trn1.32xlarge, a 15 GB image), the EKS cut, each figure's source."""
    neither = eks(fast_pull=False, prepull=False)
    cut = eks(fast_pull=True, prepull=True)
    return "\n".join([
        BEGIN,
        table(paths()),
        "",
        f"The EKS cut (`eks.fast_image_pull` and `eks.prepull_images`, both on by default) takes "
        f"{_minutes(neither.seconds - cut.seconds)} of the {_minutes(neither.term('image pull').seconds)} minutes a "
        f"new node's pod waits for its image: {_minutes(cut.term('image pull').seconds)} are left.",
        "",
        sources(),
        END,
    ])
