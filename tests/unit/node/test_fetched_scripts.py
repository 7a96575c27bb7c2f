"""What a Slurm node fetches from the scripts bucket and then runs as root is checked against the sha256 the cluster
configuration carries (issue 33, item 2): the batch scripts and the prolog the head node installs, the metrics
program a compute node starts.

The setup script runs as it is, with the arguments of the cluster configuration (the pcluster CLI's, from
``make synth``'s dist/parallelcluster/, and the stack's, from its assets), under the stand-ins of tests/support/head_node.py and
tests/app/parallelcluster/test_parallelcluster_image.py; the bucket is a folder holding what a user uploads (dist/parallelcluster/), and
an object of it is changed as someone who can write the bucket would change it.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.app.parallelcluster.test_parallelcluster_image import make_host
from tests.support.head_node import CONFIG, HeadNode
from tests.support.helpers import resources, synth
from trainium_cdk.app.dist.parallelcluster import fetched_digests, fetched_files
from trainium_cdk.app.parallelcluster.cluster_config import cluster_configuration, placeholder_ids
from trainium_cdk.app.parallelcluster.sbatch import head_node_files
from trainium_cdk.parallelcluster.parts import NEURON_METRICS_NAME, PROLOG_NAME, SETUP_SCRIPT

HOSTILE = "#!/bin/bash\ntouch \"$HOME/owned\"  # written by someone who can write the bucket\n"


@pytest.fixture
def head(tmp_path) -> HeadNode:
    root = tmp_path / "root"
    root.mkdir()
    return HeadNode(root)


def _installed(head: HeadNode) -> dict[str, Path]:
    """Where the head node puts each fetched file: name -> path (the OS user's copy and the shared one)."""
    names = placeholder_ids(CONFIG, fetched_digests(CONFIG)).batch_scripts
    paths = {f"ubuntu/{n}": head.ubuntu / "trainium" / n for n in names}
    paths |= {f"shared/{n}": head.home / "trainium" / n for n in names}
    paths[PROLOG_NAME] = head.root / "opt" / "slurm" / "etc" / "scripts" / "prolog.d" / PROLOG_NAME
    return paths


def test_the_head_node_installs_the_objects_whose_sha256_the_configuration_carries(head):
    proc, calls = head.run()
    assert proc.returncode == 0, proc.stderr
    files = fetched_files(CONFIG)
    for where, path in _installed(head).items():
        assert path.read_text() == files[path.name], where
    prolog = _installed(head)[PROLOG_NAME]
    assert prolog.stat().st_mode & 0o777 == 0o755
    assert (head.home / "trainium" / next(n for n in files if n.endswith(".sbatch"))).stat().st_mode & 0o777 == 0o644
    # One fetch per object: the OS user's copy is the checked file.
    assert len([c for c in calls if c.startswith("aws s3 cp")]) == len(_installed(head)) // 2 + 1


@pytest.mark.parametrize("changed", ["sbatch", "prolog"])
def test_an_object_changed_in_the_bucket_is_refused_and_nothing_of_it_is_installed(head, changed):
    name = PROLOG_NAME if changed == "prolog" else next(n for n in fetched_files(CONFIG) if n.endswith(".sbatch"))
    (head.bucket / name).write_text(HOSTILE)
    proc, _ = head.run()
    # Non-zero: ParallelCluster fails the head node's bootstrap (or the update) on it.
    assert proc.returncode != 0
    digest = fetched_digests(CONFIG)[name]
    (reason,) = [line for line in proc.stderr.splitlines() if "refused" in line]
    assert reason == f"neuron_setup: refused s3://${{SCRIPTS_BUCKET}}/trainium/{name}: its sha256 is not {digest} (it changed after synth)"
    assert all(path.read_text() != HOSTILE for path in _installed(head).values() if path.exists())
    assert not _installed(head)[PROLOG_NAME].exists() or changed != "prolog"
    assert not (head.ubuntu / "trainium" / name).exists() and not (head.home / "trainium" / name).exists()
    assert not any(path.read_text() == HOSTILE for path in head.root.rglob("*") if path.is_file() and path.parent != head.bucket)


def test_a_url_without_its_digest_is_refused(head):
    """An argument of the old form NAME=S3URL (a configuration of an older version): nothing is fetched."""
    args = [a.split("=", 1)[0] + "=" + a.split("@", 1)[1] if "@s3://" in a else a for a in head.args()]
    proc = subprocess.run(["bash", str(head.script), *args],
                          env=head.env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert [line for line in proc.stderr.splitlines() if "refused" in line][0].endswith(": not SHA256@s3://bucket/key")


# -- a compute node's metrics program ---------------------------------------------------------------------------

def _compute_node(tmp_path: Path, program: str) -> tuple[subprocess.CompletedProcess, Path]:
    """A compute node of an image with the pins (tests/app/parallelcluster/test_parallelcluster_image.py) runs its OnNodeConfigured: the
    setup script with the queue's arguments; the bucket holds ``program`` at the metrics program's key."""
    host = make_host(tmp_path)
    config = cluster_configuration(CONFIG, placeholder_ids(CONFIG, fetched_digests(CONFIG)))
    args = config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Args"]
    url = dict(zip(args[::2], args[1::2], strict=True))["--metrics-program"].split("@", 1)[1]
    bucket = tmp_path / "s3"
    (bucket / url.removeprefix("s3://")).parent.mkdir(parents=True)
    (bucket / url.removeprefix("s3://")).write_text(program)
    opt = tmp_path / "root" / "opt" / "trainium-cdk"
    stand_ins = {
        # s3 cp s3://BUCKET/KEY DEST: DEST holds $S3/BUCKET/KEY.
        "aws": 'echo "aws $*" >> "$STATE/calls"\nsrc="${*: -2:1}"\ncp "$S3/${src#s3://}" "${*: -1}"',
        # /usr/bin/python3 (replaced below): records what it would run.
        "python3": 'echo "python3 $*" >> "$STATE/calls"',
    }
    for name, body in stand_ins.items():
        (host.bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (host.bindir / name).chmod(0o755)
    host.boot()
    text = (SETUP_SCRIPT.read_text().replace("/etc/", f"{host.root}/etc/")
            .replace("/sys/module/", f"{host.root}/sys/module/").replace("/opt/trainium-cdk", str(opt))
            .replace("/usr/bin/python3", str(host.bindir / "python3")))
    env = {"PATH": f"{host.bindir}:/usr/bin:/bin", "STATE": str(host.state), "ROOT": str(host.root),
           "HOME": str(host.root), "S3": str(bucket)}
    proc = subprocess.run(["bash", "-c", text, "neuron_setup.sh", *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc, host.state / "calls"


def test_a_compute_node_starts_the_metrics_program_it_fetched_intact(tmp_path):
    program = fetched_files(CONFIG)[NEURON_METRICS_NAME]
    proc, calls = _compute_node(tmp_path, program)
    assert proc.returncode == 0, proc.stderr
    installed = tmp_path / "root" / "opt" / "trainium-cdk" / NEURON_METRICS_NAME
    assert installed.read_text() == program
    assert any(c.startswith(f"python3 {installed} install") for c in calls.read_text().splitlines())


def test_a_compute_node_refuses_a_changed_metrics_program_and_runs_none_of_it(tmp_path):
    proc, calls = _compute_node(tmp_path, HOSTILE)
    assert proc.returncode != 0
    digest = hashlib.sha256(fetched_files(CONFIG)[NEURON_METRICS_NAME].encode()).hexdigest()
    (reason,) = [line for line in proc.stderr.splitlines() if "refused" in line]
    assert reason.endswith(f"/trainium/{NEURON_METRICS_NAME}: its sha256 is not {digest} (it changed after synth)")
    assert not (tmp_path / "root" / "opt" / "trainium-cdk" / NEURON_METRICS_NAME).exists()
    assert not any(c.startswith("python3") for c in calls.read_text().splitlines())
    assert not (tmp_path / "root" / "owned").exists()


def test_the_stacks_arguments_carry_the_sha256_of_each_asset_they_name():
    """The stack's cluster configuration (assets at keys of their asset hash, not of their sha256): each fetched
    object's argument names its asset and carries the sha256 of that asset's file in the cloud assembly."""
    app = synth(CONFIG, nag=False)
    (cluster,) = resources(app.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    configuration = cluster["Properties"]["ClusterConfiguration"]
    args = [*configuration["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Args"],
            *configuration["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Args"]]
    pairs = list(zip(args[::2], args[1::2], strict=True))
    fetched = [value for flag, value in pairs if flag in ("--sbatch", "--prolog", "--metrics-program")]
    assert len(fetched) == len(head_node_files(CONFIG)) + 2
    for value in fetched:
        head, _, rest = value["Fn::Join"][1][0].partition("@s3://")
        digest = head.rpartition("=")[2]
        key = next(part for part in value["Fn::Join"][1] if isinstance(part, str) and "/" in part and "@" not in part)
        (asset,) = app.outdir.glob(f"asset.{key.rsplit('/', 1)[1]}")
        assert hashlib.sha256(asset.read_bytes()).hexdigest() == digest, value
