"""`trn doctor`'s image check: every container image in a private ECR registry that the deploy's nodes and jobs
pull exists, before a node waits on a pull that cannot succeed.

What is checked: the Neuron training image of the config's track in its region (Neuron's Deep Learning Container,
which Batch jobs run and every image the project builds starts FROM, from the same repository and tag of the public
gallery), when a container backend (EKS, Batch) is deployed; and every image the config names (workloads.image,
workloads.jobs[].image, batch.image_uri). Asked with ECR's BatchGetImage, the pull permission the DLC registries
grant every account (DescribeImages they do not). Images outside private ECR (the public gallery, Docker Hub) are
listed as not checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import error_code, is_denied
from trainium_cdk.cli.doctor_local import FAIL, PASS, SKIP, WARN, Check
from trainium_cdk.facts import versions

CONTAINER_BACKENDS = ("eks", "batch")
ECR_IMAGE = re.compile(r"(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repository>[^:@]+)"
                       r"(?::(?P<tag>[^@]+)|@(?P<digest>sha256:[0-9a-f]{64}))?")
MISSING = ("ImageNotFound", "ImageTagDoesNotMatchDigest", "RepositoryNotFoundException")


def wanted(config: Config) -> dict[str, str]:
    """Each image the deploy pulls that the config decides, and what sets it (for the fix)."""
    found: dict[str, str] = {}
    if any(b in config.backends for b in CONTAINER_BACKENDS):
        track = config.neuron_track
        found[versions.neuron_training_image(config.region, track.name)] = (
            f"the {track.name} track's training image (versions.py training_image_tag {track.training_image_tag})")
    if config.workloads.image:
        found.setdefault(config.workloads.image, "workloads.image")
    for job in config.workloads.jobs:
        if job.image:
            found.setdefault(job.image, f"workloads.jobs[{job.name}].image")
    if "batch" in config.backends and config.batch.image_uri:
        found.setdefault(config.batch.image_uri, "batch.image_uri")
    return found


def images(config: Config, ecr: Callable[[str], Any]) -> list[Check]:
    """One line per image: PASS when its registry has it, FAIL when not, WARN when the pull permission is denied.
    ``ecr(region)`` is an ECR client of that region."""
    checks = []
    for image, source in wanted(config).items():
        name = f"image {image}"
        found = ECR_IMAGE.fullmatch(image)
        if not found:
            checks.append(Check(SKIP, name, f"{source}: not in a private ECR registry, not checked"))
            continue
        image_id = {"imageDigest": found["digest"]} if found["digest"] else {"imageTag": found["tag"] or "latest"}
        try:
            answer = ecr(found["region"]).batch_get_image(
                registryId=found["account"], repositoryName=found["repository"], imageIds=[image_id])
            problems = [f.get("failureCode") or "failed" for f in answer.get("failures", [])]
            problems = problems or ([] if answer.get("images") else ["ImageNotFound"])
        except Exception as error:  # noqa: BLE001 - a missing image or a denial is this image's line; the rest the check's
            if is_denied(error):
                checks.append(Check(WARN, name, f"{source}: ecr:BatchGetImage denied, existence not checked",
                                    "run doctor with a role that may pull from ECR"))
                continue
            if error_code(error) not in MISSING:
                raise
            problems = [error_code(error)]
        if problems:
            checks.append(Check(
                FAIL, name, f"{source}: not in its registry ({', '.join(problems)})",
                "a tag its publisher has published (Neuron's DLC page lists them): fix the pin or the field, or build "
                "and push your own (`trn image push`) and name it in workloads.image",
            ))
        else:
            checks.append(Check(PASS, name, f"{source}: in its registry"))
    return checks
