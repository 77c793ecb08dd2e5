"""The report page in a real browser: headless Chromium (Debian's ``chromium``) loads
``index.html`` from disk with networking off, every figure decodes (``naturalWidth > 0``) and
nothing is written to the console at error level.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on fds 3 and 4), so no port, websocket library or browser
download is needed. Set-up installs ``chromium`` with apt-get when it is missing and the test
runs as root; otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from test_report_build import shared_report

CHROMIUM_NAMES = ("chromium", "chromium-browser")
INSTALL_TIMEOUT_S = 900


def _find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@pytest.fixture(scope="session")
def chromium() -> str:
    found = _find_chromium()
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and there is no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it needs root (apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S)
        r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"], env=env,
                           capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"chromium could not be installed: {e}")
    found = _find_chromium()
    if not found:
        pytest.skip(f"chromium could not be installed (apt-get exit {r.returncode}: {r.stderr.strip()[-300:]})")
    return found


class Cdp:
    """Minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``."""

    def __init__(self, exe: str, user_data_dir: Path) -> None:
        import fcntl

        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        # move the child's ends above 4 first, so that placing them on 3 and 4 cannot clobber one
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_r)
        os.close(from_browser_w)

        def wire_fds() -> None:  # the browser reads commands on fd 3 and writes on fd 4
            os.dup2(high_r, 3)  # dup2 makes 3 and 4 inheritable; everything else closes on exec
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-extensions", "--no-first-run",
             "--no-default-browser-check", "--mute-audio", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={user_data_dir}", "--window-size=1280,1000", "about:blank"],
            preexec_fn=wire_fds, close_fds=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(high_r)
        os.close(high_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise ConnectionError("chromium closed the DevTools pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 30.0) -> dict:
        self._next_id += 1
        msg: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for m in self.events:
            if m.get("method") == method:
                return m
        while True:
            m = self._read_message(deadline)
            self.events.append(m)
            if m.get("method") == method:
                return m

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _console_errors(events: list[dict]) -> list[str]:
    errors = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif e.get("method") == "Runtime.exceptionThrown":
            errors.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
        elif e.get("method") == "Network.loadingFailed":
            errors.append("network: " + json.dumps(p)[:300])
    return errors


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return shared_report(tmp_path_factory)[0]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(chromium, report, tmp_path):
    cdp = Cdp(chromium, tmp_path / "profile")
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.send("Page.navigate", {"url": report.html_path.resolve().as_uri()}, session=session)
        cdp.wait_event("Page.loadEventFired", timeout_s=60)
        res = cdp.send("Runtime.evaluate", {
            "expression": "JSON.stringify({title: document.title, h2: document.querySelectorAll('h2').length,"
                          " imgs: Array.from(document.images).map(i => [i.complete, i.naturalWidth,"
                          " i.naturalHeight, i.alt])})",
            "returnByValue": True}, session=session)
        page = json.loads(res["result"]["value"])
        shot = cdp.send("Page.captureScreenshot", {"format": "png"}, session=session)
        errors = _console_errors(cdp.events)
    finally:
        cdp.close()
    assert page["title"] == report.title
    assert page["h2"] >= 4  # summary, runs, scaling, published (+ predicted, notes)
    assert len(page["imgs"]) == len(report.figures) > 0
    for complete, width, height, alt in page["imgs"]:
        assert complete and width > 0 and height > 0, alt
    assert errors == []
    assert len(shot["data"]) > 1000  # the page painted
