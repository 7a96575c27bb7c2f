"""Teams on EKS (issue 46): a Volcano queue per team weighted by its share, and a team's jobs in its queue with its
label, each object validated against the Volcano CRD the project vendors (its openAPIV3Schema)."""

from __future__ import annotations

from pathlib import Path

import cdk8s
import jsonschema
import yaml

import trainium_cdk
from tests.support.helpers import config_with
from tests.unit.charts.test_chart_training import job
from trainium_cdk.app.workloads import workload_charts
from trainium_cdk.charts.training import QUEUE_CHART_ID, DistributedTrainingJob

CRDS = Path(trainium_cdk.__file__).resolve().parent / "helm_charts" / "volcano" / "crd" / "bases"


def _schema(file: str, version: str) -> dict:
    crd = yaml.safe_load((CRDS / file).read_text())
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return found["schema"]["openAPIV3Schema"]


def test_the_app_adds_a_queue_per_team_weighted_by_its_share():
    config = config_with(teams=[{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}])
    queues = workload_charts(cdk8s.App(), config, image="example.com/train:1")[QUEUE_CHART_ID].to_json()
    schema = _schema("scheduling.volcano.sh_queues.yaml", "v1beta1")
    for queue in queues:
        jsonschema.validate(queue, schema)
    assert {(q["metadata"]["name"], q["spec"]["weight"], (q["metadata"].get("labels") or {}).get("team"))
            for q in queues} == {("training", 1, None), ("team-research", 3, "research"),
                                 ("team-platform-eng", 1, "platform-eng")}


def test_without_teams_one_queue_as_before():
    queues = workload_charts(cdk8s.App(), config_with(), image="example.com/train:1")[QUEUE_CHART_ID].to_json()
    assert [q["metadata"]["name"] for q in queues] == ["training"]


def test_a_team_s_gang_job_is_in_its_queue_with_its_label():
    (volcano_job,) = cdk8s.Testing.synth(DistributedTrainingJob(
        cdk8s.Testing.app(), "test", job=job("trn1.32xlarge", nodes=2, team="research")))
    jsonschema.validate(volcano_job, _schema("batch.volcano.sh_jobs.yaml", "v1alpha1"))
    assert volcano_job["spec"]["queue"] == "team-research"
    assert {t["template"]["metadata"]["labels"]["team"] for t in volcano_job["spec"]["tasks"]} == {"research"}
