"""One headless Chromium for every page a test session draws, driven over the DevTools protocol.

Starting Chromium costs about a second of CPU (and several of wall time) per page, and the HTML
tests load dozens of pages at two widths each. Here one browser serves them all: each load is
a fresh tab, sized before the page is opened (the report draws its charts at the width it
opens at), so a page sees what ``chromium --window-size=W,H --dump-dom`` would show it, and
the tab's console and uncaught errors are collected as its stderr lines would have been.

The protocol runs over ``--remote-debugging-pipe`` (file descriptors 3 and 4 of the browser,
messages ending in a NUL byte): no port, no websocket library.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: How long one page (or one command) may take before the test fails instead of hanging.
TIMEOUT_S = 120.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--hide-scrollbars",
]


def find_chromium() -> str:
    """Debian's ``chromium``, or skip: but fail when ``TRACESCALE_REQUIRE_ALL=1`` (CI)."""
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("TRACESCALE_REQUIRE_ALL") == "1":
        pytest.fail("chromium is required (TRACESCALE_REQUIRE_ALL=1): apt-get install -y chromium")
    pytest.skip(
        "chromium not installed (apt-get install -y chromium); HTML not checked in a browser"
    )


@dataclass
class Loaded:
    """What one page load gave: its DOM after the scripts ran, its console, its errors."""

    dom: str
    #: One line per console message, ``CONSOLE(<type>): <text>``, and per log entry.
    console: list[str] = field(default_factory=list)
    #: One line per uncaught exception, ``Uncaught <description>``.
    uncaught: list[str] = field(default_factory=list)
    png: bytes | None = None


def _above_4(fd: int) -> int:
    """The same pipe end as a descriptor numbered 10 or more (``fd`` itself is closed)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class Browser:
    """A headless Chromium started once; :meth:`load` opens one page in a new tab."""

    def __init__(self, binary: str, flags: list[str], profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes replies on fd 4: a shell maps our pipe
        # ends there (Popen keeps only the descriptors listed in pass_fds; bash, as dash takes
        # no descriptor above 9), from numbers above
        # 4 so that neither mapping overwrites the other end.
        to_browser_r, from_browser_w = (_above_4(fd) for fd in (to_browser_r, from_browser_w))
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        argv = [binary, *flags, f"--user-data-dir={profile}", "--remote-debugging-pipe"]
        self._proc = subprocess.Popen(
            ["bash", "-c", script, *argv, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.call("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium exited ({self._proc.poll()})")
                self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        out: dict[str, Any] = json.loads(msg)
        return out

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply (events that arrive meanwhile are kept)."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append(reply)

    def _wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not any(
            e["method"] == method and e.get("sessionId") == session for e in self._events
        ):
            self._events.append(self._read(deadline))

    def load(
        self,
        page: Path,
        width: int,
        height: int,
        *,
        screenshot: bool = False,
        dark: bool = False,
    ) -> Loaded:
        """Open ``page`` in a new ``width`` x ``height`` tab; after its load event (the
        report draws while the page is parsed) take its DOM and, with ``screenshot``, a PNG
        of the tab. ``dark``: the tab prefers a dark colour scheme (``--force-dark-mode``)."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable", session)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                session,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            if dark:
                scheme = {"name": "prefers-color-scheme", "value": "dark"}
                self.call("Emulation.setEmulatedMedia", session, features=[scheme])
            self._events.clear()
            self.call("Page.navigate", session, url=page.as_uri())
            self._wait_for("Page.loadEventFired", session)
            dom = self.call(
                "Runtime.evaluate",
                session,
                expression="document.documentElement.outerHTML",
                returnByValue=True,
            )["result"]["value"]
            png = None
            if screenshot:
                shot = self.call("Page.captureScreenshot", session, format="png")
                png = base64.b64decode(shot["data"])
            # Messages still on their way for this tab arrive before the reply to this call.
            self.call("Runtime.evaluate", session, expression="0")
            return Loaded(dom, *self._messages(session), png=png)
        finally:
            self.call("Target.closeTarget", targetId=target)
            self._events.clear()

    def _messages(self, session: str) -> tuple[list[str], list[str]]:
        console, uncaught = [], []
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
                console.append(f"CONSOLE({p['type']}): {text}")
            elif e["method"] == "Log.entryAdded":
                entry = p["entry"]
                console.append(f"CONSOLE({entry['level']}): {entry['text']}")
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                what = d.get("exception", {}).get("description") or d.get("text", "")
                uncaught.append(f"Uncaught {what}")
        return console, uncaught
