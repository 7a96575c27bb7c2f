"""The job's throughput as Prometheus gauges, published by node 0's rank 0 after each step (standard library only):
tokens a second per node and MFU, labelled with the job (the launcher's ``TRN_METRICS_JOB``) and the node.

Where the launcher writes its compile-cache counters, the same two ways (trainium_cdk/runtime/launcher.py): a
node_exporter textfile ``<TRN_METRICS_DIR>/<job>-throughput.prom`` (written under another name, then renamed), and on
EKS a PUT to the Prometheus Pushgateway at ``TRN_METRICS_PUSH_URL``, group ``job/<job>/node/<n>/source/throughput``
(its own group: the launcher's PUT of the counters at the end replaces its group only). A push that fails warns
once and stops pushing; training goes on. The jobs dashboard plots both gauges.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

# trainium_cdk/facts/names.py holds the same names (tests/unit/jobs/test_recipe_titan_llama3.py checks).
TOKENS_METRIC = "trn_job_tokens_per_second_per_node"
MFU_METRIC = "trn_job_model_flops_utilization_ratio"
JOB_VARIABLE, DIR_VARIABLE, PUSH_VARIABLE = "TRN_METRICS_JOB", "TRN_METRICS_DIR", "TRN_METRICS_PUSH_URL"
PUSH_TIMEOUT_S = 5


class Throughput:
    """Publishes the gauges where the environment says; nothing where it says nowhere."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.job = env.get(JOB_VARIABLE, "")
        self.node = env.get("NODE_RANK", "0")
        folder = env.get(DIR_VARIABLE, "")
        self.file = Path(folder) / f"{self.job}-throughput.prom" if folder and Path(folder).is_dir() and self.job else None
        url = env.get(PUSH_VARIABLE, "")
        self.push = f"{url.rstrip('/')}/metrics/job/{self.job}/node/{self.node}/source/throughput" if url and self.job else None

    def text(self, tokens_per_s: float, mfu: float | None) -> str:
        labels = f'job="{self.job}",node="{self.node}"'
        lines = [f"# TYPE {TOKENS_METRIC} gauge", f"{TOKENS_METRIC}{{{labels}}} {tokens_per_s}"]
        if mfu is not None:
            lines += [f"# TYPE {MFU_METRIC} gauge", f"{MFU_METRIC}{{{labels}}} {mfu}"]
        return "\n".join(lines) + "\n"

    def publish(self, tokens_per_s: float, mfu: float | None) -> None:
        text = self.text(tokens_per_s, mfu)
        if self.file is not None:
            partial = self.file.with_name(f".{self.file.name}.{os.getpid()}")
            try:
                partial.write_text(text)
                os.replace(partial, self.file)
            except OSError as error:
                print(f"titan-llama3: cannot write {self.file}: {error}", file=sys.stderr, flush=True)
                self.file = None
        if self.push is not None:
            request = urllib.request.Request(self.push, data=text.encode(), method="PUT")
            try:
                urllib.request.urlopen(request, timeout=PUSH_TIMEOUT_S).close()
            except OSError as error:
                print(f"titan-llama3: cannot push the throughput to {self.push} ({error}): no more pushes",
                      file=sys.stderr, flush=True)
                self.push = None
