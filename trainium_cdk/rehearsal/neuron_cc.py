"""The Neuron compiler's persistent cache, for the launch rehearsal: what torch-neuronx's compiler wrapper does with
a job's graph on the XLA track, without Neuron. The stage installs this file as ``sitecustomize`` of every Python it
starts (:class:`~trainium_cdk.rehearsal.stage.Stage`), so each training process (a torchrun worker: ``RANK`` set)
"compiles" one graph when it starts, as torch-xla hands its first graph to the wrapper.

What it writes and prints is what Neuron documents ("Neuron Persistent Cache", aws-neuron-sdk
about-neuron/arch/neuron-features/neuron-caching.rst; log lines as torch-neuronx prints them in public reports,
e.g. aws-neuron/aws-neuron-sdk#825 and huggingface/optimum-neuron#129):

- the cache is ``--cache_dir=<dir>`` of ``NEURON_CC_FLAGS``, else ``NEURON_COMPILE_CACHE_URL`` (``--cache_dir`` wins);
- a graph lives in ``<cache>/neuronxcc-<compiler version>/MODULE_<graph hash>+<flags hash>/``: ``model.hlo_module.pb``,
  ``compile_flags.json``, ``model.neff`` and, once complete, ``model.done``;
- a hit: ``INFO ||NEURON_CC_WRAPPER||: Using a cached neff at <that folder>/model.neff. Exiting with a successfully
  compiled graph.``; a miss: ``INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: ['neuronx-cc', 'compile', ...
  '<workdir>/model.MODULE_<...>.hlo_module.pb', '--output', ...]``, then the folder is written.

The graph's hash here: the command, the world size and the rank (a tensor-parallel rank's graph differs from its
peers'), so a second run of the same command over the same cache hits every graph and a changed command misses.
A TorchNeuron job (its ``TRN_TORCH_DEVICE`` set by its recipe) is left alone: its torch.compile cache is another one.
Standard library only: it runs before anything else in every process of a rehearsed node.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import sys
import uuid
from pathlib import Path

COMPILER_VERSION = "0.0.0.0+rehearsal"
# The recipes' device variable (trainium_cdk.names.TORCH_DEVICE_VARIABLE; this file imports nothing of the package).
NATIVE_TRACK_MARKER = "TRN_TORCH_DEVICE"


def _log(tag: str, message: str) -> None:
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    sys.stderr.write(f"{stamp}:  {os.getpid()}  INFO ||{tag}||: {message}\n")
    sys.stderr.flush()


def cache_and_flags(environ: dict[str, str]) -> tuple[Path | None, list[str]]:
    """The cache folder the wrapper would use (None: not a shared one; the rehearsal writes nothing to /var/tmp) and
    the compiler flags, the wrapper's own cache flag left out."""
    words = shlex.split(environ.get("NEURON_CC_FLAGS", ""))
    cache = environ.get("NEURON_COMPILE_CACHE_URL") or None
    flags = []
    for word in words:
        if word.startswith("--cache_dir="):
            cache = word.split("=", 1)[1]
        else:
            flags.append(word)
    return (Path(cache) if cache and "://" not in cache else None), flags


def compile_graph(environ: dict[str, str], argv: list[str]) -> None:
    """One graph of this process, from the cache or "compiled" into it."""
    if "RANK" not in environ or NATIVE_TRACK_MARKER in environ:
        return
    cache, flags = cache_and_flags(environ)
    if cache is None:
        return
    _log("NEURON_CACHE", f"Compile cache path: {cache}")
    graph = hashlib.sha256(json.dumps([argv, environ.get("WORLD_SIZE"), environ["RANK"]]).encode()).hexdigest()
    module = f"MODULE_{graph[:20]}+{hashlib.sha256(' '.join(flags).encode()).hexdigest()[:8]}"
    folder = cache / f"neuronxcc-{COMPILER_VERSION}" / module
    if (folder / "model.done").exists():
        _log("NEURON_CC_WRAPPER", f"Using a cached neff at {folder / 'model.neff'}. Exiting with a successfully "
             "compiled graph.")
        return
    workdir = Path("/tmp", "rehearsal", "neuroncc_compile_workdir", str(uuid.uuid4()))
    cmd = ["neuronx-cc", "compile", "--framework", "XLA", f"{workdir}/model.{module}.hlo_module.pb", "--output",
           f"{workdir}/model.{module}.neff", *flags]
    _log("NEURON_CC_WRAPPER", f"Call compiler with cmd: {cmd}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.hlo_module.pb").write_bytes(graph.encode())
    (folder / "compile_flags.json").write_text(json.dumps(flags))
    (folder / "model.neff").write_bytes(b"rehearsal: no NEFF\n")
    (folder / "model.done").touch()


if __name__ == "sitecustomize":  # installed by the stage; imported as a module of the package, it does nothing
    compile_graph(dict(os.environ), list(getattr(sys, "orig_argv", sys.argv))[1:])
