"""`trn check fabric`: submit the fabric check (trainium_cdk.runtime.fabric) as a job, or read its report.

    trn check fabric --nodes 2 [--backend batch|eks] [--group NAME] [--min-fraction F] [--dry-run]
    trn check fabric --report LOG [--group NAME] [--min-fraction F]

Batch: a multi-node job on the deployed job queue and definition, with the fabric program as the command
(one process per NeuronCore). EKS: a Volcano job of the training chart with the same command, created through
the Kubernetes API with your kubeconfig as `trn submit` does (--dry-run prints it instead, for
`kubectl apply -f -`). ParallelCluster: `sbatch ~/trainium/fabric-<group>.sbatch` on the head node.
On Batch and EKS every NeuronCore of every node joins one torch.distributed group (torchrun's rendezvous, no
ssh) and measures all-reduce, all-gather and reduce-scatter in bf16 across the hosts; on ParallelCluster
nccom-test does (MPI over ssh). The job's log (rank 0) holds one report per operation in nccom-test's table;
--report parses it and prints PASS or FAIL against the type's reference figure (trainium_cdk/facts/catalog.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import yaml

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import client, parse_overrides, read_config, session, stack_outputs
from trainium_cdk.cli.jobs import JOB_BACKENDS, backend_of, check_nodes, default_name, group_of, same_job_flags
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import DIST_BACKEND_VARIABLE, NEURON_DEVICE, TORCH_DEVICE_VARIABLE
from trainium_cdk.runtime.fabric import (
    FABRIC_SIZES,
    check_applies,
    fabric_command,
    parse_reports,
    verdict,
)
from trainium_cdk.runtime.launcher import launch_command

# One process per NeuronCore (the job definition's NPROC_PER_NODE), on TorchNeuron's device and process group.
FABRIC_ENV = {TORCH_DEVICE_VARIABLE: NEURON_DEVICE, DIST_BACKEND_VARIABLE: NEURON_DEVICE, **FABRIC_SIZES}


def add_parser(sub: Any) -> None:
    check = sub.add_parser("check", help="checks of a deployed cluster (fabric)")
    inner = check.add_subparsers(dest="check", metavar="CHECK", required=True)
    p = inner.add_parser(
        "fabric", help="neuron-ls on every node, then bf16 collectives between the hosts against a reference",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--nodes", type=int, metavar="N", help="nodes of the check (default: the group's nodes)")
    p.add_argument("--backend", choices=(*JOB_BACKENDS, "parallelcluster"),
                   help="default: the job backend the config deploys (parallelcluster: prints the sbatch command)")
    p.add_argument("--group", metavar="NAME", help="compute group (default: the first)")
    p.add_argument("--name", help="job name (default: fabric-<group>-<date>-<time>)")
    p.add_argument("--min-fraction", type=float, metavar="F",
                   help="PASS at this fraction of the type's reference figure (default: the catalog's)")
    p.add_argument("--report", metavar="LOG", help="parse a finished check's log (- for stdin) instead of submitting")
    p.add_argument("--image", metavar="URI", help="EKS: the image (default: workloads.image, else the example image)")
    p.add_argument("--dry-run", "--print", action="store_true", dest="dry_run",
                   help="print what would be submitted (EKS: the manifest), submit nothing")
    k = p.add_argument_group("EKS backend")
    k.add_argument("--namespace", help="Kubernetes namespace (default: the kubeconfig context's, else default)")
    k.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[])
    p.set_defaults(func=fabric)


def batch_request(*, name: str, queue: str, definition: str, nodes: int, config: Config, group_name: str) -> dict[str, Any]:
    """submit_job arguments: the deployed definition on ``nodes`` nodes, the fabric program as command."""
    spec = config.spec(group_of(config, group_name))
    overrides = {
        "command": launch_command(fabric_command(spec, multi_host=False)),
        "environment": [{"name": k, "value": v} for k, v in FABRIC_ENV.items()],
    }
    return {
        "jobName": name, "jobQueue": queue, "jobDefinition": definition,
        "nodeOverrides": {"numNodes": nodes, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]},
    }


def eks_job(config: Config, *, name: str, nodes: int, group_name: str, image: str) -> list[dict[str, Any]]:
    """The Volcano job (or single-node Job) of the training chart, running the fabric program."""
    import cdk8s

    from trainium_cdk.charts.training import training_job
    from trainium_cdk.runtime.jobs import JobSpec

    group = group_of(config, group_name)
    spec = config.spec(group)
    job = JobSpec(
        name=name, instance=spec, command=fabric_command(spec, multi_host=False), image=image, nodes=nodes,
        max_nodes=group.maximum, env=dict(FABRIC_ENV), group=group.name, retries=0, shared_storage=config.storage.enabled,
        neuron_track=config.neuron_track,
    )
    return training_job(cdk8s.App(), name, job=job, queue=config.workloads.queue).to_json()


def fabric(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.overrides))
    group = group_of(config, args.group)
    spec = config.spec(group)
    if args.min_fraction is not None and not 0 < args.min_fraction <= 1:
        raise ConfigError("--min-fraction", args.min_fraction, "a fraction above 0 and at most 1")
    check_applies(spec)
    if args.report is not None:
        text = sys.stdin.read() if args.report == "-" else open(args.report, encoding="utf-8").read()
        result, lines = verdict(parse_reports(text), spec, min_fraction=args.min_fraction)
        out.write("\n".join(lines) + "\n")
        return 0 if result == "PASS" else 1
    nodes = check_nodes(config, group, args.nodes)
    if nodes < 2:
        raise ConfigError("--nodes", nodes, "at least 2: the fabric check runs across nodes")
    backend = backend_of(config, args.backend)
    name = args.name or f"fabric-{default_name(group)}"
    if backend == "eks":
        return _eks(args, config, name=name, nodes=nodes, group_name=group.name, out=out)
    if backend == "parallelcluster":
        from trainium_cdk.app.parallelcluster.sbatch import fabric_script_name

        out.write(f"on the head node (`trn` does not reach Slurm): sbatch -N {nodes} ~/trainium/"
                  f"{fabric_script_name(group)}\n  then: trn check fabric --report fabric-<job id>.out\n")
        return 0
    from trainium_cdk.cli.batch_jobs import STACK_PART, group_output_value
    from trainium_cdk.facts.names import BATCH_JOB_DEFINITION_ARN, BATCH_JOB_QUEUE_ARN

    sess = session(config.region)
    stack = config.stack_name(STACK_PART)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="batch")
    request = batch_request(
        name=name,
        queue=group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group=group.name, stack=stack),
        definition=group_output_value(outputs, BATCH_JOB_DEFINITION_ARN, group=group.name, stack=stack),
        nodes=nodes, config=config, group_name=group.name,
    )
    if args.dry_run:
        out.write(f"dry run: would submit to AWS Batch in {config.region}:\n{json.dumps(request, indent=2)}\n")
        return 0
    job_id = client(sess, "batch").submit_job(**request)["jobId"]
    out.write(f"submitted fabric check {name}: job id {job_id} ({nodes} x {spec.name})\n")
    flags = same_job_flags(args, "batch")
    out.write(f"  trn status {job_id} {flags} --wait\n"
              f"  trn logs {job_id} {flags} > fabric.log && trn check fabric --report fabric.log\n")
    return 0


def _eks(args: argparse.Namespace, config: Config, *, name: str, nodes: int, group_name: str, out: TextIO) -> int:
    """Create the fabric job through the Kubernetes API (as `trn submit`); --dry-run prints it instead."""
    from trainium_cdk.cli import eks_jobs

    if args.dry_run:
        image = args.image or config.workloads.image or "${TRAINING_IMAGE}"
        objects = eks_job(config, name=name, nodes=nodes, group_name=group_name, image=image)
        out.write(yaml.safe_dump_all(objects, sort_keys=False))
        out.write(f"# kubectl apply -f - ; then: trn logs {name} --backend eks > fabric.log && "
                  "trn check fabric --report fabric.log\n")
        return 0
    image = eks_jobs.training_image(args, config)
    objects = eks_job(config, name=name, nodes=nodes, group_name=group_name, image=image)
    kube = eks_jobs.Kube(args)
    eks_jobs.create(kube, objects, name=name, out=out)
    ns = kube.namespace
    out.write(f"submitted fabric check {name} to namespace {ns} ({nodes} nodes)\n")
    flags = same_job_flags(args, "eks", namespace=ns)
    out.write(f"  trn status {name} {flags} --wait\n")
    out.write(f"  trn logs {name} {flags} > fabric.log && trn check fabric --report fabric.log\n")
    return 0
