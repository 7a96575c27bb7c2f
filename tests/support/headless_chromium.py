"""Debian's Chromium, headless, driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands in on
fd 3, answers and events out on fd 4, each a JSON message ended by a NUL byte). No port, no websocket, no driver.

The protocol's DOM.getDocument with ``pierce`` reads shadow roots, closed ones too: mkdocs-material draws each diagram
into a closed shadow root, which neither the page's scripts nor `chromium --dump-dom` can see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1400,1000", "--remote-debugging-pipe")


def executable() -> str | None:
    return shutil.which("chromium")


class Chromium:
    """One browser and one page (``open``), with every network request the page made (``requested``)."""

    def __init__(self) -> None:
        binary = executable()
        assert binary, "chromium is not installed"
        self._profile = tempfile.TemporaryDirectory()
        commands_in, self._commands = os.pipe()
        self._answers, answers_out = os.pipe()
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{commands_in} 4>&{answers_out}', binary, *FLAGS,
             f"--user-data-dir={self._profile.name}", "about:blank"],
            pass_fds=(commands_in, answers_out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(commands_in)
        os.close(answers_out)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30) -> dict[str, Any]:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        for answer in self._messages(deadline):
            if answer.get("id") == self._next_id:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return dict(answer["result"])
            self.events.append(answer)
        raise AssertionError(f"{method}: no answer in {timeout} s")

    def _messages(self, deadline: float) -> Iterator[dict[str, Any]]:
        while time.monotonic() < deadline:
            while b"\0" in self._buffer:
                message, self._buffer = self._buffer.split(b"\0", 1)
                yield json.loads(message)
            chunk = os.read(self._answers, 1 << 20)
            assert chunk, f"chromium ended (exit {self.process.poll()})"
            self._buffer += chunk

    def open(self, url: str) -> None:
        """A new page at ``url``, returning once its load event fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Network.enable")
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.send("Runtime.evaluate", {"expression": "1"})  # a round trip: events queue up meanwhile
            assert time.monotonic() < deadline, f"{url}: no load event in 30 s"
            time.sleep(0.1)

    def requested(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def document(self) -> dict[str, Any]:
        """The page's whole DOM tree, shadow roots included (each node: nodeName, attributes, children, ...)."""
        return dict(self.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"])

    def screenshot(self, node_id: int) -> bytes:
        """A PNG of one element of the last ``document()``, at its size."""
        import base64

        quad = self.send("DOM.getBoxModel", {"nodeId": node_id})["model"]["border"]
        xs, ys = quad[0::2], quad[1::2]
        clip = {"x": min(xs), "y": min(ys), "width": max(xs) - min(xs), "height": max(ys) - min(ys), "scale": 1}
        shot = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        os.close(self._commands)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._answers)
        self._profile.cleanup()


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``node`` and every node under it: children, shadow roots, a frame's document."""
    yield node
    for child in [*node.get("shadowRoots", []), *node.get("children", []), *filter(None, [node.get("contentDocument")])]:
        yield from walk(child)


def classes(node: dict[str, Any]) -> set[str]:
    attributes = node.get("attributes", [])
    named = dict(zip(attributes[0::2], attributes[1::2], strict=True))
    return set(named.get("class", "").split())


def text(node: dict[str, Any]) -> str:
    """The text under ``node``, its whitespace runs one space."""
    return " ".join(" ".join(n["nodeValue"] for n in walk(node) if n.get("nodeType") == 3).split())
