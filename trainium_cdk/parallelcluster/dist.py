"""dist/parallelcluster/: the cluster configuration, the setup script and the batch scripts for users
of the pcluster CLI (the same cluster the ParallelCluster stack deploys)."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainium_cdk.config import Config
from trainium_cdk.parallelcluster.cluster_config import render_cluster_yaml
from trainium_cdk.parallelcluster.health import render_prolog
from trainium_cdk.parallelcluster.parts import HEAD_NODE_SCRIPT, PROLOG_NAME, SETUP_SCRIPT
from trainium_cdk.parallelcluster.sbatch import render_all



def write_dist(config: Config, outdir: Path = Path("dist")) -> list[Path]:
    """Write ``outdir/parallelcluster/{<project>-cluster.yaml, neuron_setup.sh, head_node_setup.sh,
    train-<group>.sbatch}``
    (the ParallelCluster backend's ``dist`` in trainium_cdk/backends.py); return the paths written."""
    out = outdir / "parallelcluster"
    out.mkdir(parents=True, exist_ok=True)
    cluster = out / f"{config.project}-cluster.yaml"
    cluster.write_text(render_cluster_yaml(config))
    written = [cluster]
    for source in (SETUP_SCRIPT, HEAD_NODE_SCRIPT):
        script = out / source.name
        shutil.copyfile(source, script)
        script.chmod(0o755)
        written.append(script)
    for name, text in {**render_all(config), PROLOG_NAME: render_prolog(config)}.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
