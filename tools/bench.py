"""`make bench`: how synth scales (not a test).

1. Cold wall time and peak memory of `cdk synth` through the CDK CLI: the default app, and an app with 8
   compute groups, 3 times each from an empty output folder; the median wall time and the median of the
   peak resident memory of the whole process tree (CLI, Python app, jsii runtime), sampled every 20 ms.
2. Templates per backend as compute groups are added (1, 10, 25, 50 identical trn1.32xlarge groups,
   synthesized in this process): templates, resources, outputs and bytes of the app (nested stacks
   included), its largest template, and what each extra group costs between 10 and 25 and 25 and 50.
3. `trn rehearse` of a user's 2 nodes x 2 processes job (an all-reduce over every rank) on each backend,
   through the installed `trn`, median wall time of 3 (the budget: 60 s on 2 idle cores).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3
GROUP_TYPES = ("trn1.32xlarge", "trn1n.32xlarge", "trn1.2xlarge", "trn1.32xlarge")


def _tree_rss_kib(root_pid: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid, ppid = int(entry.name), int(fields["PPid"])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_once(context: list[str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [str(ROOT / "node_modules/.bin/cdk"), "synth", "--quiet", "--output", out, *context]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"synth failed: {' '.join(cmd)}\n{proc.stderr.read().decode()}")
    return wall, peak / 1024


def eight_group_config(path: Path) -> None:
    config = yaml.safe_load((ROOT / "config/default.yaml").read_text())
    config["compute_groups"] = [
        {"name": f"g{i}", "instance_type": GROUP_TYPES[i % len(GROUP_TYPES)],
         "nodes": 1 if GROUP_TYPES[i % len(GROUP_TYPES)] == "trn1.2xlarge" else 2,  # no EFA: one node a job
         "az_ids": "usw2-az4" if i % 2 == 0 else "usw2-az3"}
        for i in range(8)
    ]
    path.write_text(yaml.safe_dump(config))


def measure(label: str, context: list[str]) -> float:
    runs = [run_once(context) for _ in range(RUNS)]
    wall = statistics.median(r[0] for r in runs)
    peak = statistics.median(r[1] for r in runs)
    print(f"{label:<28} wall {wall:6.1f} s   peak RSS {peak:7.0f} MiB   (runs: "
          + ", ".join(f"{r[0]:.1f}s" for r in runs) + ")")
    return wall


SCALE_BACKENDS = ("eks", "batch", "parallelcluster")
SCALE_SIZES = (1, 10, 25, 50)


def synth_in_process(raw: dict, outdir: Path) -> list[dict]:
    """Every template of the app ``raw`` describes (nested stacks included), as CDK writes them."""
    import aws_cdk as cdk

    from trainium_cdk.app.config import build_config
    from trainium_cdk.app.stacks import compose

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    compose(app, build_config(raw))
    app.synth()
    return [{"bytes": p.stat().st_size, **json.loads(p.read_text())} for p in sorted(outdir.glob("*.template.json"))]


def scale(backend: str) -> None:
    base = yaml.safe_load((ROOT / "config/default.yaml").read_text())
    rows = {}
    for count in SCALE_SIZES:
        raw = {**base, "backends": [backend], "compute_groups": [
            {"name": f"g{i}", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"} for i in range(count)]}
        with tempfile.TemporaryDirectory() as tmp:
            templates = synth_in_process(raw, Path(tmp))
        rows[count] = (
            len(templates),
            sum(len(t.get("Resources", {})) for t in templates),
            sum(len(t.get("Outputs", {})) for t in templates),
            sum(t["bytes"] for t in templates) / 1024,
            max(t["bytes"] for t in templates) / 1024,
        )
        print(f"  {backend:<16} {count:>3} groups: {rows[count][0]:>2} templates, {rows[count][1]:>4} resources, "
              f"{rows[count][2]:>3} outputs, {rows[count][3]:7.1f} KiB (largest {rows[count][4]:6.1f} KiB)")
    steps = list(zip(SCALE_SIZES[1:], SCALE_SIZES[2:], strict=False))
    print(f"  {backend:<16} per extra group: " + "; ".join(
        f"{a}->{b}: {(rows[b][1] - rows[a][1]) / (b - a):.1f} resources, {(rows[b][3] - rows[a][3]) / (b - a):.1f} KiB"
        for a, b in steps))


REHEARSE_BACKENDS = ("eks", "batch", "parallelcluster")
REHEARSE_BUDGET_S = 60.0
# A user's job: its own argument, a collective over every rank.
REHEARSE_SCRIPT = """import argparse, torch, torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
assert total.item() == dist.get_world_size() * (dist.get_world_size() + 1) / 2
dist.destroy_process_group()
"""


def rehearse_times() -> dict[str, list[float]]:
    """Wall seconds of each `trn rehearse` run (2 nodes x 2 processes), per backend."""
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "train.py").write_text(REHEARSE_SCRIPT)
        for backend in REHEARSE_BACKENDS:
            for _ in range(RUNS):
                start = time.perf_counter()
                done = subprocess.run(
                    [str(ROOT / ".venv/bin/trn"), "rehearse", "--config", str(ROOT / "config/default.yaml"),
                     "--backend", backend, "--nodes", "2", "--procs-per-node", "2", "--", "train.py", "--lr", "3e-4"],
                    cwd=tmp, capture_output=True, text=True, check=False,
                )
                if done.returncode != 0:
                    sys.exit(f"trn rehearse --backend {backend} failed:\n{done.stdout[-3000:]}{done.stderr}")
                times.setdefault(backend, []).append(time.perf_counter() - start)
    return times


def rehearse() -> None:
    print(f"`trn rehearse` of a 2 nodes x 2 processes job, median of {RUNS}, {os.cpu_count()} cores "
          f"(budget {REHEARSE_BUDGET_S:.0f} s)")
    for backend, runs in rehearse_times().items():
        median = statistics.median(runs)
        verdict = "within budget" if median <= REHEARSE_BUDGET_S else "OVER BUDGET"
        print(f"  {backend:<16} wall {median:5.1f} s  {verdict}  (runs: " + ", ".join(f"{r:.1f}s" for r in runs) + ")")


def main() -> None:
    rehearse()
    print(f"templates as compute groups are added (in-process synth, {os.cpu_count()} cores)")
    for backend in SCALE_BACKENDS:
        scale(backend)
    print(f"cold `cdk synth` through the CDK CLI, median of {RUNS}, {os.cpu_count()} cores")
    default = measure("default app (1 group)", [])
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "eight.yaml"
        eight_group_config(config)
        eight = measure("8 compute groups", ["-c", f"config={config}"])
    print(f"each extra compute group adds {(eight - default) / 7:.2f} s")


if __name__ == "__main__":
    main()
