"""`trn fit`: will a job's share fit a NeuronCore, and a node's host memory, before a node is paid for?

For a recipe (``--job``), its memory plan (``Recipe.fit``): per rank, parameters, gradients, optimizer state,
activations at the job's sequence length and batch, the loss, FSDP's gathered parameters and the Neuron runtime's
reserve, against the memory of one NeuronCore of the group's type at its default logical NeuronCore size; the host
memory of a node while the job loads. Exit 0 when it fits, 1 when it does not (with the change that would fit), 2
for a mistake in the arguments. For your own script it says what it cannot know, and the limits your script has.

`trn submit --job` and `trn rehearse --job` run the same check first (cli/jobs.py ``check_fit``); ``--skip-fit`` goes on
with a warning.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.cli.jobs import UserJob, _common, add_job_arguments, load, user_job
from trainium_cdk.errors import ConfigError
from trainium_cdk.recipes import FitReport, FitUnknown, fit_of, gib, recipe_for


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fit", help="check that a job's share fits a NeuronCore and a node's memory (offline; exit 1 if not)",
        description="Print, per rank, what a recipe's job keeps in device memory (parameters, gradients, optimizer "
        "state, activations at its sequence length and batch, the loss, FSDP's gathered parameters, the Neuron "
        "runtime's reserve) against one NeuronCore of the compute group's type, and a node's host memory while it "
        "loads. Exit 0 when it fits, 1 when it does not, naming the change that would fit. No AWS call.",
    )
    add_job_arguments(p)
    _common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    job = user_job(args, config)
    if job.job is None and not job.program:
        raise ConfigError("--job", None, "a recipe (--job NAME) or your training command after --")
    if job.job is None:
        out.write(_own_script(config, job))
        return 0
    recipe_for(config, job.job, backend)  # a recipe that runs there, or one line naming those that do
    try:
        report = fit_of(config, job.job, group=job.group, backend=backend, nodes=job.nodes, env=job.env)
    except FitUnknown as unknown:
        out.write(f"trn fit cannot tell whether {job.job} fits: {unknown}\n")
        out.write(_limits(config, job))
        return 0
    if report is None:
        out.write(f"trn fit has no memory plan for {job.job}: it cannot tell whether the job fits\n")
        out.write(_limits(config, job))
        return 0
    out.write(render(report))
    return 0 if report.fits else 1


def render(report: FitReport) -> str:
    width = max(len(name) for name, _ in (*report.device, *report.host)) + 2
    lines = [report.summary, f"per rank, on {report.device_label}:"]
    lines += [f"  {name:<{width}}{gib(value):>8} GiB" for name, value in report.device]
    lines.append(f"  {'total':<{width}}{gib(report.device_total):>8} GiB of {gib(report.device_limit)} GiB: "
                 + ("fits" if report.device_total <= report.device_limit else "does not fit"))
    lines.append("host memory of a node while the job loads:")
    lines += [f"  {name:<{width}}{gib(value):>8} GiB" for name, value in report.host]
    lines.append(f"  {'total':<{width}}{gib(report.host_total):>8} GiB of {gib(report.host_limit)} GiB: "
                 + ("fits" if report.host_total <= report.host_limit else "does not fit"))
    lines += [f"assumed: {what}" for what in report.assumptions]
    lines.append("fits" if report.fits else f"does not fit: {report.suggestion}")
    return "\n".join(lines) + "\n"


def _limits(config: Config, job: UserJob) -> str:
    spec = config.spec(job.group)
    core = spec.core_memory_gib
    per_core = f"{core:g} GiB of device memory a NeuronCore" if core is not None else "unknown device memory"
    return (f"your job's limits on {spec.name}: {per_core} ({spec.neuron_cores} NeuronCores a node at the default "
            f"logical NeuronCore size), {spec.memory_gib} GiB of host memory a node for {spec.neuron_cores} "
            "processes\n")


def _own_script(config: Config, job: UserJob) -> str:
    return ("trn fit cannot know what your script keeps in memory (its model, precision, sharding and batch are in "
            "its code): rehearse it (`trn rehearse -- SCRIPT`) and size it against these limits\n"
            + _limits(config, job))


__all__ = ["add_parser", "render", "run"]

