"""Synthesize an app once and hand tests its templates, with cdk-nag and cfn-lint on the side."""

from __future__ import annotations

import atexit
import copy
import functools
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdk_nag
from aws_cdk.assertions import Template

from tests.support import paths, synth_cache
from trainium_cdk.app.config import Config, build_config
from trainium_cdk.app.stacks import TrainingApp, compose
from trainium_cdk.facts.catalog import SUPPORTED_TRAINING_TYPES

ROOT = paths.ROOT
# The feature flags of cdk.json, so that tests synthesize what `cdk synth` does.
CDK_CONTEXT: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]

BASE_CONFIG: dict[str, Any] = {
    "project": "t",
    "region": "us-west-2",
    "network": {"az_ids": ["usw2-az4", "usw2-az3"]},
    "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"}],
    # The catalog knows no AZs for these types in us-east-2: tests declare them as `trn azs` writes them.
    "instance_offerings": {
        t: {"us-east-2": ["use2-az3", "use2-az2"]}
        for t in SUPPORTED_TRAINING_TYPES
    },
}


# cfn-lint's instance data lists trn2.48xlarge only in us-east-2 (and ap-south-2), so trn2 variants
# are tested there.
US_EAST_2: dict[str, Any] = {"region": "us-east-2", "network": {"az_ids": ["use2-az3", "use2-az2"]}}
TRN2_TYPES = ("trn2.48xlarge", "trn2u.48xlarge")
# cfn-lint 1.58 lists trn2u.48xlarge (UltraServer) in no region at all: only its "unknown instance
# type" finding (E3628) is waived, and only for that type.
CFN_LINT_UNKNOWN_TYPES = ("trn2u.48xlarge",)


def for_type(instance_type: str, **group: Any) -> dict[str, Any]:
    """config_with() arguments for a single group of ``instance_type`` in a region cfn-lint knows (one
    node per job for a type without EFA: the config refuses more)."""
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG

    if not DEFAULT_CATALOG.get(instance_type).has_efa:
        group = {"nodes": 1, **group}
    if instance_type in TRN2_TYPES:
        return {**US_EAST_2, "group": {"instance_type": instance_type, "az_ids": "use2-az3", **group}}
    return {"group": {"instance_type": instance_type, **group}}


# Every cloud assembly of a test run (about 57 MB each with the kubectl layer) goes under one folder,
# removed when the run ends.
_OUTDIRS = Path(tempfile.mkdtemp(prefix="trainium-cdk-tests-"))
atexit.register(shutil.rmtree, _OUTDIRS, True)


def new_outdir() -> Path:
    return Path(tempfile.mkdtemp(dir=_OUTDIRS))


def config_with(**changes: Any) -> Config:
    """BASE_CONFIG with top-level sections replaced and `group` merged into the first compute group."""
    raw = json.loads(json.dumps(BASE_CONFIG))
    group = changes.pop("group", None)
    if group:
        raw["compute_groups"][0].update(group)
    raw.update(changes)
    return build_config(raw)


class Synthesized:
    """An app's cloud assembly and, for the tests that read live constructs, its stacks (``stacks``). An app read
    from the run's cache (tests/support/synth_cache.py) composes its stacks on first use, into an app of their
    own that is never synthesized: composing costs a fraction of a synth, and the construct tree, hence every
    stack name, artifact id and nested template file, is the same."""

    def __init__(self, config: Config, stacks: TrainingApp | None, assembly: cdk.cx_api.CloudAssembly, outdir: Path):
        self.config, self._stacks, self.assembly, self.outdir = config, stacks, assembly, outdir

    @property
    def stacks(self) -> TrainingApp:
        if self._stacks is None:
            self._stacks = compose(cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT), self.config)
        return self._stacks

    def template_json(self, role: str) -> dict[str, Any]:
        stack = self._stack(role)
        return self.assembly.get_stack_by_name(stack.stack_name).template

    def template_with_nested(self, role: str) -> dict[str, Any]:
        """The stack's template with its nested stacks' resources and parameters merged in (each Batch compute group
        is a nested stack: stacks/batch_stack.py), for tests that look for resources of a kind wherever they are."""
        merged = copy.deepcopy(self.template_json(role))
        for nested in self._stack(role).node.find_all():
            if isinstance(nested, cdk.NestedStack):
                template = json.loads((self.outdir / nested.template_file).read_text())
                for section in ("Resources", "Parameters"):
                    merged.setdefault(section, {}).update(template.get(section, {}))
        return merged

    def template(self, role: str) -> Template:
        return Template.from_json(self.template_json(role))

    def template_paths(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))

    def _stack(self, role: str) -> cdk.Stack:
        if role == "network":
            return self.stacks.network
        if role == "storage":
            assert self.stacks.storage is not None
            return self.stacks.storage
        return self.stacks.backends[role]


def add_nag_packs(app: cdk.App) -> None:
    """cdk-nag's packs the project answers to: AwsSolutions and NIST 800-53 rev 5. A finding not acknowledged
    (trainium_cdk/constructs/nag.py) fails the app's synth."""
    cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app), cdk_nag.NIST80053R5Checks(app))


def synth(config: Config, *, nag: bool = True, builtin_validation: bool = False) -> Synthesized:
    """Synthesize the whole app for a config; with cdk-nag, a finding not acknowledged fails the synth. Within a
    test run, an app synthesized before (by any worker) is read from the run's cache (tests/support/synth_cache.py).

    ``builtin_validation``: the CDK's own CloudFormation validation (aws-cdk-lib's CloudFormationValidatePlugin, a
    rule pack it runs in every synth unless told not to; cdk.json's @aws-cdk/core:validateAgainstDefaultRules makes a
    finding fail the synth). It takes 0.15 s of a 0.7 s synth: it runs in the apps the quality gates read
    (quality_synth) and in every `make synth`, not in the suite's other synths (about 90), which read templates."""
    composed: list[TrainingApp] = []

    def synthesize(outdir: Path) -> cdk.cx_api.CloudAssembly:
        app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT, builtin_cloud_formation_validation=builtin_validation)
        if nag:
            add_nag_packs(app)
        composed.append(compose(app, config))
        return app.synth()

    cached = synth_cache.entry("app", config, synthesize, nag=nag, builtin_validation=builtin_validation,
                               context=CDK_CONTEXT)
    if cached is None:
        outdir = new_outdir()
        assembly = synthesize(outdir)
        synth_cache.log_uncached("app", config)
        return Synthesized(config=config, stacks=composed[0], assembly=assembly, outdir=outdir)
    outdir, _ = cached
    return Synthesized(config=config, stacks=composed[0] if composed else None,
                       assembly=cdk.cx_api.CloudAssembly(str(outdir)), outdir=outdir)


def quality_synth(config: Config) -> Synthesized:
    """An app the quality gates read: cdk-nag and the CDK's built-in CloudFormation validation in its synth (a
    finding of either fails it), then cfn-lint (and checkov for the shared apps) over its templates."""
    return synth(config, builtin_validation=True)


def nag_violations(result: Synthesized) -> list[str]:
    report = json.loads((result.outdir / "validation-report.json").read_text())
    return [
        f"{v['ruleName']} at {c['constructPath']}"
        for plugin in report["pluginReports"]
        for v in plugin.get("violations", [])
        for c in v["violatingConstructs"]
    ]


# cfn-lint's findings depend only on the template's text, the region and cfn-lint's own version (its rules and
# schemas ship in the package): content-addressed, they are kept for every worker and later runs. Many apps of the
# suite write the same network or storage template, which cfn-lint took seconds to read again each time.
LINT_CACHE = ROOT / ".pytest_cache" / "trainium-cdk" / "cfn-lint"


def cfn_lint_errors(path: Path, region: str) -> list[str]:
    """cfn-lint errors (E rules) of one template; warnings and informational findings pass."""
    import hashlib

    import cfnlint.version
    from cfnlint.api import ManualArgs, lint

    from trainium_cdk.cli.yaml_edit import write_atomic

    text = path.read_text()
    key = hashlib.sha256(f"{cfnlint.version.__version__}\0{region}\0{CFN_LINT_UNKNOWN_TYPES}\0{text}".encode())
    cached = LINT_CACHE / f"{key.hexdigest()}.json"
    if cached.is_file():
        found = json.loads(cached.read_text())
    else:
        found = [
            [m.rule.id, m.message, m.linenumber]
            for m in lint(text, config=ManualArgs(regions=[region]))
            if m.rule.id.startswith("E")
            and not (m.rule.id == "E3628" and any(f"'{t}' is not one of" in m.message for t in CFN_LINT_UNKNOWN_TYPES))
        ]
        LINT_CACHE.mkdir(parents=True, exist_ok=True)
        write_atomic(cached, json.dumps(found))  # a worker reads a whole entry or none
    return [f"{rule} {message} ({path.name}:{line})" for rule, message, line in found]


def resources(template: dict[str, Any], type_name: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_name}


# The Batch CPU queue's resources (stacks/batch_stack.py: construct CpuQueue in nested stack CpuQueue).
CPU_QUEUE_PREFIX = "CpuQueue"


def group_resources(template: dict[str, Any], type_name: str) -> dict[str, dict[str, Any]]:
    """The resources of a type that belong to the compute groups: the Batch CPU queue's left out."""
    return {k: v for k, v in resources(template, type_name).items() if not k.startswith(CPU_QUEUE_PREFIX)}


def imported(result: Synthesized, value: Any) -> Any:
    """What an ``Fn::ImportValue`` of the app reads (the exporting output's value, such as ``{"Ref": id}``); any other
    value as it is."""
    if not (isinstance(value, dict) and set(value) == {"Fn::ImportValue"}):
        return value
    (exported,) = [o["Value"] for p in result.template_paths() for o in json.loads(p.read_text()).get("Outputs", {}).values()
                   if o.get("Export", {}).get("Name") == value["Fn::ImportValue"]]
    return exported


def strings(value: Any) -> list[str]:
    """Every string of a template value (or any JSON value), at any depth."""
    if isinstance(value, str):
        return [value]
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [s for v in inner for s in strings(v)]


def template_text(value: Any) -> str:
    """A template value as text: an Fn::Join's parts joined, any other token as "<token>"."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(template_text(p) for p in parts)
    return "<token>"


@functools.cache
def vendored_chart_hashes() -> dict[str, str]:
    """Each vendored Helm chart's CDK asset hash (the S3 key of its zip), to its folder name."""
    from aws_cdk import aws_eks_v2

    from trainium_cdk.constructs.vendored_charts import chart_asset, chart_versions

    stack = cdk.Stack(cdk.App(outdir=tempfile.mkdtemp(prefix="charts-")))
    cluster = aws_eks_v2.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c")
    return {chart_asset(stack, name, name, cluster).asset_hash: name for name in chart_versions()}


def helm_chart_name(props: dict[str, Any]) -> str:
    """The vendored chart a synthesized ``Custom::AWSCDK-EKS-HelmChart`` installs (by its ``ChartAssetURL``)."""
    [key] = re.findall(r"/([0-9a-f]{64})\.zip", json.dumps(props["ChartAssetURL"]))
    return vendored_chart_hashes()[key]
