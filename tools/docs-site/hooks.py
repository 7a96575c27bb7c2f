"""mkdocs hooks (mkdocs.yml `hooks:`): the site's diagrams render from mermaid served by the site itself.

mkdocs-material turns a ```mermaid block into a diagram with mermaid.js, which it loads from unpkg.com unless the
page has already defined `mermaid`: offline, or behind a proxy that blocks the CDN, the diagram stays raw text.
Here mermaid is the npm package pinned in tools/docs-site/package-lock.json (`make setup-dev` installs it into
tools/docs-site/node_modules): its self-contained dist/mermaid.min.js becomes the site file MERMAID_URI, and each page
that holds a diagram loads it before material's bundle. Pages without a diagram do not load its 3.5 MB.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

MERMAID_JS = Path(__file__).resolve().parent / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
MERMAID_URI = "assets/javascripts/mermaid.min.js"
_DIAGRAM = '<pre class="mermaid">'
_BUNDLE = re.compile(r'<script src="[^"]*assets/javascripts/bundle\.[0-9a-f]+\.min\.js"></script>')


def on_files(files: Files, config: Any) -> Files:
    if not MERMAID_JS.is_file():
        raise PluginError(
            f"{MERMAID_JS} is missing: the site's diagrams need the mermaid pinned in tools/docs-site/package-lock.json "
            "(`make setup-dev` installs it)"
        )
    files.append(File.generated(config, MERMAID_URI, abs_src_path=str(MERMAID_JS)))
    return files


def on_post_page(output: str, page: Any, config: Any) -> str:
    if _DIAGRAM not in output:
        return output
    bundle = _BUNDLE.search(output)
    if bundle is None:
        raise PluginError(f"{page.file.src_uri}: mkdocs-material's bundle script not found: mermaid cannot go before it")
    script = f'<script src="{get_relative_url(MERMAID_URI, page.url)}"></script>'
    return output[: bundle.start()] + script + output[bundle.start():]
