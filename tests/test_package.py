"""The library as another CDK app uses it: a built wheel, installed, imported and synthesized."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXAMPLE_MARKER = "<!-- example:compose"


def readme_example() -> str:
    """The README's "Using the constructs in your own CDK app" example, verbatim."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(EXAMPLE_MARKER):]
    block = after[after.index("```python\n") + len("```python\n"):]
    return block[: block.index("```")]


USER_APP = readme_example() + "print(trainium_cdk.__file__)\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the wheel and install it (no dependencies: they are this environment's) into a folder."""
    tmp = tmp_path_factory.mktemp("package")
    wheels, site = tmp / "wheels", tmp / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(wheels)], check=True)
    (wheel,) = wheels.glob("trainium_cdk-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    return tmp, site


def test_wheel_carries_the_package_data(installed):
    _, site = installed
    package = site / "trainium_cdk"
    for relative in (
        "py.typed", "parallelcluster/neuron_setup.sh", "parallelcluster/head_node_setup.sh",
        "examples/mlp/Dockerfile", "examples/mlp/train.py", "examples/bert/Dockerfile", "config/default.yaml",
    ):
        assert (package / relative).is_file(), relative
    # In the checkout the packaged default is a link to config/default.yaml; the wheel carries the file.
    default = package / "config" / "default.yaml"
    assert not default.is_symlink()
    assert default.read_bytes() == (ROOT / "config" / "default.yaml").read_bytes()
    entry_points = next(site.glob("trainium_cdk-*.dist-info")) / "entry_points.txt"
    assert "trn = trainium_cdk.cli:main" in entry_points.read_text()


def test_public_api_is_listed_and_resolves():
    import trainium_cdk

    for name in trainium_cdk.__all__:
        assert getattr(trainium_cdk, name) is not None, name
    with pytest.raises(AttributeError):
        trainium_cdk.NoSuchConstruct  # noqa: B018


def test_a_separate_cdk_app_imports_and_synthesizes_the_constructs(installed):
    tmp, site = installed
    app_dir, out = tmp / "user-app", tmp / "cdk.out"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(USER_APP)
    # Outside the repository, with the installed package first: the user's view of the library.
    env = {**os.environ, "PYTHONPATH": str(site), "CDK_OUTDIR": str(out)}
    proc = subprocess.run(
        [sys.executable, "app.py"], cwd=app_dir, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith(str(site))
    template = json.loads((out / "MyTraining.template.json").read_text())
    kinds = [r["Type"] for r in template["Resources"].values()]
    assert "AWS::FSx::FileSystem" in kinds and "AWS::EKS::Cluster" in kinds and "AWS::EKS::Nodegroup" in kinds
    assert "AWS::Batch::JobQueue" in kinds
    launch_templates = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert len(launch_templates) == 2  # the node group's and the Batch compute environment's
    for lt in launch_templates:  # trn1n.32xlarge: all 16 EFA interfaces
        assert len(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 16
    # The cluster can run a Neuron pod as it comes: both device plugins, and the claim jobs mount.
    manifests = json.dumps([
        r["Properties"]["Manifest"] for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ])
    for name in ("neuron-device-plugin", "aws-efa-k8s-device-plugin", "fsx-lustre"):
        assert name in manifests, name


INSTALLED_DEFAULTS = textwrap.dedent(
    """
    import json

    from trainium_cdk.config import DEFAULT_CONFIG_PATH, load_config
    from trainium_cdk.stacks.pipeline_stack import cli_version

    print(json.dumps({
        "path": str(DEFAULT_CONFIG_PATH), "config": load_config().model_dump(mode="json"), "cli": cli_version(),
    }))
    """
)


def test_the_installed_package_finds_its_defaults(installed):
    """An app that pip-installed the wheel, away from any checkout: load_config() reads the packaged
    default config, and the pipeline knows the CDK CLI version without package.json."""
    from trainium_cdk.config import load_config

    tmp, site = installed
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", INSTALLED_DEFAULTS], cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["path"] == str(site / "trainium_cdk" / "config" / "default.yaml")
    assert found["config"] == load_config(ROOT / "config" / "default.yaml").model_dump(mode="json")
    assert found["cli"] == json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]


def test_the_cdk_cli_pin_is_package_json_s():
    from trainium_cdk.versions import CDK_CLI_VERSION

    assert CDK_CLI_VERSION == json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
