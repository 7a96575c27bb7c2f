"""Which job containers and job processes of a synthesized app reach the instance metadata service (IMDS), and
with it the role of the node they run on.

Read from what the app deploys (templates, the node setup programs they ship, the Kubernetes objects of dist/ and
of `trn submit`), per backend:

- EKS: a pod in the host's network reaches it (it is the node, as far as the network goes); any other pod is one
  hop further than the node, which IMDSv2 with a hop limit of 1 refuses (EC2 user guide, "Configure the instance
  metadata options": the PUT response's TTL), unless its node's launch template or EC2NodeClass allows more hops.
- Batch: a container job (``Type: container``) runs in the host's network: it reaches it whatever the hop limit. A
  multi-node parallel job runs in awsvpc mode, on an interface of its own: it reaches it unless the node's ECS
  agent runs with ``ECS_AWSVPC_BLOCK_IMDS=true`` (ECS agent configuration; the node setup writes it).
- ParallelCluster and the development instance: jobs are processes on the host, which reach it as the host does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.helpers import Synthesized, resources
from tests.support.reachability import Reachability
from tests.support.scheduling import PodTemplate, pod_templates
from trainium_cdk.app.dist import write_dist
from trainium_cdk.app.workloads import render_job
from trainium_cdk.facts.names import TRAINING_NAMESPACE

# The node setup's line that turns the block on (trainium_cdk/node/batch_node.sh); what it does to the agent's
# configuration is tested by running it (tests/app/batch/test_batch_node_setup.py).
_BLOCKS_AWSVPC_IMDS = re.compile(r'^[^#\n]*echo ECS_AWSVPC_BLOCK_IMDS=true >> "\$ecs_config"', re.MULTILINE)
_SETUP_DIGEST = re.compile(r"NODE_SETUP_SHA256=['\"]?([0-9a-f]{64})")


@dataclass(frozen=True)
class Reach:
    """A job container (``container``) or job process (else) of ``backend`` that reaches the instance metadata."""

    backend: str
    what: str
    why: str
    container: bool = True

    def __str__(self) -> str:
        return f"{self.backend}: {self.what} ({self.why})"


def reaching_metadata(result: Synthesized, dist: Path) -> list[Reach]:
    """Every job container and job process of the app that reaches the instance metadata."""
    templates = {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in result.template_paths()}
    backends = set(result.config.backends)
    found: list[Reach] = []
    if "eks" in backends:
        found += _eks(result, templates, dist)
    if "batch" in backends:
        found += _batch(result, templates)
    if "parallelcluster" in backends:
        # Slurm runs a job as the submitting user's processes on the compute node: ImdsSupport v2.0 with
        # ParallelCluster's default hop limit, and no `Imds: Secured` on compute nodes (head node only).
        found += [Reach("parallelcluster", f"jobs of queue {g.name}", "host processes", container=False)
                  for g in result.config.compute_groups]
    if "instance" in backends:
        found.append(Reach("instance", "the developer's processes", "host processes", container=False))
    return found


def eks_job_pods(result: Synthesized, dist: Path) -> list[PodTemplate]:
    """The pods that run a user's work: every pod template of dist/ in the training namespace, and the jobs `trn
    submit --backend eks` renders for every group."""
    config = result.config
    pods = []
    for path in write_dist(config, dist):
        if path.name.endswith(".k8s.yaml"):
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
            training = [d for d in docs if (d.get("metadata") or {}).get("namespace") == TRAINING_NAMESPACE]
            pods += pod_templates(training, path.name)
    for group in config.compute_groups:
        for job, nodes in [("mlp", 1)] + ([("mlp-distributed", 2)] if config.spec(group).has_efa else []):
            rendered = render_job(config, name=f"cli-{job}", group=group.name, job=job, nodes=nodes,
                                  image="example.com/train:1")
            pods += pod_templates(rendered, f"trn submit {group.name} {job}")
    return pods


def _eks(result: Synthesized, templates: dict[str, dict[str, Any]], dist: Path) -> list[Reach]:
    hops = [lt["Properties"]["LaunchTemplateData"].get("MetadataOptions", {}).get("HttpPutResponseHopLimit", 1)
            for name, t in templates.items() if "eks" in name
            for lt in resources(t, "AWS::EC2::LaunchTemplate").values()]
    hops += [o["spec"]["metadataOptions"]["httpPutResponseHopLimit"]
             for _, objs in Reachability.from_dir(result.outdir).manifests() for o in objs if o.get("kind") == "EC2NodeClass"]
    pods = eks_job_pods(result, dist)
    assert pods, "no job pod seen: the walk would be vacuous"
    found = [Reach("eks", str(p), "host network") for p in pods if p.spec.get("hostNetwork")]
    if max(hops, default=1) > 1:
        found += [Reach("eks", str(p), f"hop limit {max(hops)}") for p in pods if not p.spec.get("hostNetwork")]
    return found


def _batch(result: Synthesized, templates: dict[str, dict[str, Any]]) -> list[Reach]:
    programs = {hashlib.sha256(p.read_bytes()).hexdigest(): p.read_text() for p in _setup_programs(result.outdir)}
    found = []
    for name, template in templates.items():
        environments = resources(template, "AWS::Batch::ComputeEnvironment")
        if not environments:
            continue
        # A compute group's nested stack: its queue sends every job definition of it to its compute environment.
        blocked = all(_blocks_awsvpc_imds(template, ce, programs) for ce in environments.values())
        for logical_id, definition in resources(template, "AWS::Batch::JobDefinition").items():
            kind = definition["Properties"]["Type"]
            if kind == "container":
                found.append(Reach("batch", f"{name}/{logical_id}", "container job: host network"))
            elif not blocked:
                found.append(Reach("batch", f"{name}/{logical_id}", "awsvpc without ECS_AWSVPC_BLOCK_IMDS"))
    assert programs, "no Batch node setup program found"
    return found


def _blocks_awsvpc_imds(template: dict[str, Any], environment: dict[str, Any], programs: dict[str, str]) -> bool:
    """Whether the node setup the compute environment's launch template fetches (checked by its sha256) blocks."""
    reference = environment["Properties"]["ComputeResources"]["LaunchTemplate"]["LaunchTemplateId"]
    data = template["Resources"][reference["Ref"]]["Properties"]["LaunchTemplateData"]
    digests = _SETUP_DIGEST.findall(json.dumps(data.get("UserData")))
    assert len(digests) == 1, f"the user data names one node setup: {digests}"
    program = programs[digests[0]]
    return bool(_BLOCKS_AWSVPC_IMDS.search(program))


def _setup_programs(outdir: Path) -> Iterable[Path]:
    from trainium_cdk.constructs.batch_node import SETUP_FILE_NAME

    return outdir.rglob(SETUP_FILE_NAME)
