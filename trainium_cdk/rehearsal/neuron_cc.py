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

A TorchNeuron job (the native track: ``TRN_NEURON_TRACK=native`` from the launcher's pins, or ``TRN_TORCH_DEVICE`` set
by its recipe) goes through TorchNeuron's persistent NEFF cache instead, as torch-neuronx's sources have it
(``csrc/core/compilation/CompilationCache.cpp``, ``csrc/core/cache/PersistentCacheBackend.h``, ``NeuronLogging.h``):

- the cache is ``TORCH_NEURONX_NEFF_CACHE_DIR`` (default ``/tmp/neff_cache``, which the rehearsal leaves alone), and
  ``NEURON_CC_FLAGS`` are part of the graph's key (they go to neuronx-cc as they are);
- a graph lives in ``<cache>/<key[0:2]>/<key[2:4]>/<key>.neff``, written to a temporary file and renamed;
- what it did is logged only at ``TORCH_NEURONX_LOG_LEVEL=3``, on stdout: ``[Neuron] [DEBUG] [<file>:<line>]
  Persistent cache hit key= <key> persistent_key= <hash> size= <bytes>``, or ``Persistent cache miss ...`` and, after
  the compile, ``Stored to persistent cache key= ... persistent_key= <hash> size= <bytes>`` (the words of a line
  are each followed by a space).

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
# The recipes' device variable (trainium_cdk.facts.names.TORCH_DEVICE_VARIABLE; this file imports nothing of the package).
NATIVE_TRACK_MARKER = "TRN_TORCH_DEVICE"
# The track the launcher's pins name (trainium_cdk.runtime.launcher.neuron_pins).
TRACK_VARIABLE = "TRN_NEURON_TRACK"
NEFF_CACHE_VARIABLE = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEBUG_LEVEL = 3  # NeuronLogging.h: ERROR 0, WARNING 1 (the default), INFO 2, DEBUG 3
SOURCE = "torch_neuronx/csrc/core/compilation/CompilationCache.cpp:1"  # the file; the line is a stand-in's


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


def _debug(environ: dict[str, str], *words: object) -> None:
    """A TorchNeuron debug line, when its log level asks for it (NeuronLogging.h's format)."""
    try:
        level = int(environ.get("TORCH_NEURONX_LOG_LEVEL", "1"))
    except ValueError:
        level = 1
    if level >= DEBUG_LEVEL:
        sys.stdout.write(f"[Neuron] [DEBUG] [{SOURCE}] " + "".join(f"{w} " for w in words) + "\n")
        sys.stdout.flush()


def is_native(environ: dict[str, str]) -> bool:
    return environ.get(TRACK_VARIABLE) == "native" or NATIVE_TRACK_MARKER in environ


def compile_native(environ: dict[str, str], argv: list[str]) -> None:
    """One graph of this process through TorchNeuron's persistent NEFF cache."""
    folder = environ.get(NEFF_CACHE_VARIABLE)
    if not folder:
        return
    cache = Path(folder)
    key = f"rehearsal_graph_{environ['RANK']}"
    graph = json.dumps([argv, environ.get("WORLD_SIZE"), environ["RANK"], environ.get("NEURON_CC_FLAGS", "")])
    persistent = hashlib.sha256(graph.encode()).hexdigest()
    path = cache / persistent[:2] / persistent[2:4] / f"{persistent}.neff"
    if path.exists():
        _debug(environ, "Persistent cache hit", "key=", key, "persistent_key=", persistent, "size=",
               path.stat().st_size)
        return
    _debug(environ, "Persistent cache miss", "key=", key, "persistent_key=", persistent)
    neff = b"rehearsal: no NEFF\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    temporary.write_bytes(neff)
    temporary.rename(path)
    _debug(environ, "Stored to persistent cache", "key=", key, "persistent_key=", persistent, "size=", len(neff))


def compile_graph(environ: dict[str, str], argv: list[str]) -> None:
    """One graph of this process, from the cache or "compiled" into it."""
    if "RANK" not in environ:
        return
    if is_native(environ):
        compile_native(environ, argv)
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
