"""`trn doctor --preflight`, what `make deploy` runs first: the deploy's pins found in the region as the deploy would
find them (the EKS AMI release, the Kubernetes version, each add-on's version), the development instance's quota and
offering, each failure one line with its fix, every check run whatever another found; and `make deploy` stopping on
a FAIL unless PREFLIGHT=warn. Against moto's account (tests/unit/cli/test_cli_doctor.py), with EKS's two version
APIs, which moto does not serve, answered in their own shapes (tests/support/eks_region.py); every request asserted
in full."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_support import REGION, client_error
from tests.support.eks_region import EKS_DEFAULTS, addon_versions, cluster_versions
from tests.support.helpers import ROOT
from tests.unit.cli.test_cli_doctor import config_file, doctor, fix_after, line, machine, quota, ready  # noqa: F401 (fixtures)
from trainium_cdk.cli.doctor_deploy import NEURON_AMI_PARAMETER, PREFLIGHT_RECORD
from trainium_cdk.facts import versions
from trainium_cdk.facts.versions import XLA_TRACK

MINOR = versions.KUBERNETES_VERSION
PINS = versions.EKS_ADDON_VERSIONS[MINOR]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The project directory `trn` runs in (where --preflight writes its record)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def preflight(path: Path, *extra: str):
    return doctor(path, "--preflight", *extra)


def test_a_ready_region_passes_and_the_eks_defaults_are_recorded(ready, project):
    result = preflight(config_file(project))
    assert result.code == 0, result.out
    assert result.out.startswith("trn doctor --preflight: project trainium in us-west-2\n")
    # The requests, in full: one cluster version, each add-on of the minor, the AMI release's parameters.
    assert ready.of("DescribeClusterVersions") == [{"clusterVersions": [MINOR], "includeAll": True}]
    assert ready.of("DescribeAddonVersions") == [{"addonName": n, "kubernetesVersion": MINOR} for n in PINS]
    release = XLA_TRACK.eks_ami_release
    assert {"Name": NEURON_AMI_PARAMETER.format(minor=MINOR, release=release, leaf="image_id")} in ready.of("GetParameter")
    # Only what the deploy needs of this machine: no session manager plugin, no Neuron versions.
    assert "session manager plugin" not in result.out and "neuron versions" not in result.out
    passed = line(result, "PASS", "add-ons")
    for name, pinned in PINS.items():
        assert f"{name} {pinned or EKS_DEFAULTS[name]}" in passed
    record = json.loads((project / PREFLIGHT_RECORD).read_text())
    assert record == {"region": REGION, "checked": record["checked"], "kubernetes": MINOR,
                      "addon_defaults": {n: EKS_DEFAULTS[n] for n in sorted(EKS_DEFAULTS)}}


def test_plain_doctor_records_nothing(ready, project):
    assert doctor(config_file(project)).code == 0
    assert not (project / PREFLIGHT_RECORD).exists()


def test_a_pinned_addon_the_region_lacks_fails_alone_and_names_what_it_offers(ready, project):
    offered = {n: [v for v in (p, EKS_DEFAULTS.get(n)) if v] for n, p in PINS.items()}
    offered["coredns"] = ["v1.14.4-eksbuild.1", "v1.14.2-eksbuild.1"]
    ready.fake("DescribeAddonVersions", addon_versions(offered, {"coredns": "v1.14.4-eksbuild.1", **EKS_DEFAULTS}))
    result = preflight(config_file(project))
    assert result.code == 1
    assert line(result, "FAIL", "add-on coredns") == (
        f"FAIL  add-on coredns         {PINS['coredns']} is not a version EKS offers for Kubernetes {MINOR} in us-west-2")
    assert fix_after(result, "FAIL", "add-on coredns") == (
        f"      -> pin one it lists in EKS_ADDON_VERSIONS['{MINOR}']['coredns'] in trainium_cdk/facts/versions.py: "
        "v1.14.4-eksbuild.1, v1.14.2-eksbuild.1 (default v1.14.4-eksbuild.1)")
    assert "vpc-cni" in line(result, "PASS", "add-ons") and "coredns" not in line(result, "PASS", "add-ons")
    assert "`make deploy` stops here; PREFLIGHT=warn deploys anyway" in result.out


@pytest.mark.parametrize("status, verdict", [("EXTENDED_SUPPORT", "WARN"), ("UNSUPPORTED", "FAIL")])
def test_a_kubernetes_minor_out_of_standard_support(ready, project, status, verdict):
    ready.fake("DescribeClusterVersions", cluster_versions(MINOR, status))
    result = preflight(config_file(project))
    assert MINOR in line(result, verdict, "kubernetes")
    assert "move KUBERNETES_VERSION in trainium_cdk/facts/versions.py" in fix_after(result, verdict, "kubernetes")


def test_a_kubernetes_minor_eks_does_not_offer_fails_and_the_rest_runs(ready, project):
    ready.fake("DescribeClusterVersions", {"clusterVersions": []})
    result = preflight(config_file(project))
    assert result.code == 1
    assert line(result, "FAIL", "kubernetes") == f"FAIL  kubernetes             EKS offers no Kubernetes {MINOR} in us-west-2"
    assert line(result, "PASS", "add-ons") and line(result, "PASS", "AMI eks") and line(result, "PASS", "CDK bootstrap")


def test_an_eks_ami_release_the_region_lacks_fails_with_where_to_look(ready, project, monkeypatch):
    import dataclasses

    monkeypatch.setitem(versions.NEURON_TRACKS, "xla", dataclasses.replace(XLA_TRACK, eks_ami_release="v20991231"))
    result = preflight(config_file(project))
    assert result.code == 1
    assert (f"the EKS AL2023 Neuron AMI of release v20991231 (Kubernetes {MINOR}) is not published in us-west-2"
            in line(result, "FAIL", "AMI eks"))
    assert (f"aws ssm get-parameters-by-path --path /aws/service/eks/optimized-ami/{MINOR}/amazon-linux-2023/x86_64/"
            "neuron" in fix_after(result, "FAIL", "AMI eks"))


def test_managed_node_groups_check_the_release_version_they_name(ready, project, monkeypatch):
    """The node groups' releaseVersion carries a Kubernetes patch the project infers: the AMI's published release
    version is the authority."""
    from trainium_cdk.facts import versions as module

    monkeypatch.setitem(module.EKS_AL2023_KUBERNETES_PATCHES, MINOR, f"{MINOR}.7")
    result = preflight(config_file(project, eks={"capacity": "managed", "admin_role_arns": []}))
    found = line(result, "FAIL", "AMI eks")
    assert f"whose release version is {XLA_TRACK.eks_nodegroup_release_version}" not in found
    assert f"not the node groups' {MINOR}.7-20260930" in found
    assert f"to {MINOR}.8" in fix_after(result, "FAIL", "AMI eks")


def test_the_development_instance_counts_in_the_quota_and_its_az_must_offer_it(ready, project):
    """The instance stack launches its instance at deploy: a new account's Trainium quota of 0 rolls it back."""
    ready.fake("GetServiceQuota", quota(0))
    result = preflight(config_file(project, backends=["instance"]))  # its compute group launches nothing
    assert result.code == 1
    found = line(result, "FAIL", "quota L-2C3B7624")
    assert "is 0 vCPUs (applied), below the 8 vCPUs for instance: 1-1 x trn1.2xlarge (8 vCPUs)" in found
    assert ("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-2C3B7624 "
            "--desired-value 8 --region us-west-2") in fix_after(result, "FAIL", "quota L-2C3B7624")
    assert "trn1.2xlarge is offered in" in line(result, "PASS", "offering instance")


@pytest.mark.parametrize("error, verdict, words", [
    (client_error("ThrottlingException", "DescribeAddonVersions", "Rate exceeded"), "FAIL",
     "AWS throttled DescribeAddonVersions after retries: run `trn doctor` again in a minute"),
    (client_error("AccessDeniedException", "DescribeAddonVersions", "not authorized"), "WARN",
     "allow eks:DescribeAddonVersions (read-only) for this identity"),
])
def test_a_throttled_or_denied_call_is_its_checks_line_and_says_what_to_do(ready, project, error, verdict, words):
    ready.fake("DescribeAddonVersions", error)
    result = preflight(config_file(project))
    assert words in fix_after(result, verdict, "add-ons")
    assert line(result, "PASS", "kubernetes") and line(result, "PASS", "AMI eks")  # the others ran


# -- make deploy ---------------------------------------------------------------------------------------------------


@pytest.fixture
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.parametrize("preflight_mode", ["stop", "warn"])
def test_make_deploy_runs_the_preflight_and_stops_on_a_fail(moto_endpoint, tmp_path, preflight_mode):
    """`make deploy` against an account with nothing in it (moto on loopback: no CDK bootstrap, no quota, no AMI),
    the CDK CLI replaced by an echo: the preflight's FAILs stop it before `cdk deploy`, unless PREFLIGHT=warn."""
    config = tmp_path / "config.yaml"
    config.write_text((ROOT / "config" / "default.yaml").read_text())
    env = {**os.environ, "AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2", "TRN_CONFIG": str(config),
           "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    for inherited in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "ARGS"):  # of the `make test` running this
        env.pop(inherited, None)
    done = subprocess.run(
        ["make", "--no-print-directory", "deploy", f"PREFLIGHT={preflight_mode}", "ASSEMBLY=@true", "ARGS=",
         "CDK=echo cdk-deploy-ran"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "trn doctor --preflight: project trainium in us-west-2" in done.stdout
    assert "FAIL  CDK bootstrap" in done.stdout and "FAIL  AMI eks" in done.stdout
    # APIs moto does not serve answer HTTP 500 with an HTML page: each is its check's line, and every check ran.
    assert "could not check: ec2:DescribeCapacityReservations failed" in done.stdout and "Traceback" not in done.stderr
    if preflight_mode == "stop":
        assert done.returncode != 0 and "cdk-deploy-ran" not in done.stdout
        assert "make deploy: the preflight failed (above): fix each FAIL, or PREFLIGHT=warn to deploy anyway" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert "cdk-deploy-ran deploy --app cdk.out --all" in done.stdout


def test_make_pins_shows_the_version_eks_installs_once_the_preflight_recorded_it(ready, project):
    """`make pins` (tools/pins.py, in the project directory): an add-on without a pin is `unverified` until a
    preflight records what EKS installs in the region, then `recorded` with that version."""
    import sys

    def pins_lines() -> list[str]:
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "pins.py")], cwd=project, capture_output=True,
                              text=True, timeout=60, check=False)
        unpinned = [f"[{name}]" for name, pin in PINS.items() if pin is None]
        return [ln for ln in done.stdout.splitlines() if "EKS_ADDON_VERSIONS" in ln and any(u in ln for u in unpinned)]

    assert [ln.split()[0] for ln in pins_lines()] == ["unverified"] * len(EKS_DEFAULTS)
    assert preflight(config_file(project)).code == 0
    lines = pins_lines()
    assert len(lines) == len(EKS_DEFAULTS)
    for name, version in EKS_DEFAULTS.items():
        (found,) = [ln for ln in lines if f"[{name}]" in ln]
        assert found.split()[0] == "recorded" and found.endswith(f"(none) EKS installs {version}")
