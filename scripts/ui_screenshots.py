"""Screenshots of a running Dagster webserver's pages in headless Chromium, driven over the DevTools protocol
(the docs' images of the UI: docs/OPERATIONS.md#the-dagster-ui).

    python scripts/ui_screenshots.py http://127.0.0.1:3000 docs/images \
        ui-results-verdicts=/assets/demo/results?view=events --height 1600

Each NAME=PATH is loaded, Dagster's first-visit dialog is skipped, and the page is saved as NAME.png once it
has had SETTLE_S to render (the UI loads its data after the page).
"""

import argparse
import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import websocket

from eval_pipeline_tests.support.chromium import CHROMIUM_FLAGS

DEVTOOLS_PORT = 9333
SETTLE_S = 8
FLAGS = [*CHROMIUM_FLAGS, "--hide-scrollbars"]
SKIP_DIALOG = (
    "[...document.querySelectorAll('button')].filter(b => b.textContent.trim() === 'Skip').forEach(b => b.click())"
)


class Tab:
    """One Chromium tab, spoken to over its DevTools websocket."""

    def __init__(self, url: str) -> None:
        self.socket = websocket.create_connection(url, timeout=60)
        self.sent = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.sent += 1
        self.socket.send(json.dumps({"id": self.sent, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.sent:
                return message.get("result", message)


def first_tab(deadline_s: float = 30) -> Tab:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            targets = requests.get(f"http://127.0.0.1:{DEVTOOLS_PORT}/json", timeout=2).json()
            return Tab(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        except (requests.ConnectionError, StopIteration):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def shoot(base: str, out: Path, pages: list[str], width: int, height: int) -> None:
    profile = tempfile.mkdtemp()
    command = [shutil.which("chromium") or "chromium", *FLAGS, f"--user-data-dir={profile}"]
    chromium = subprocess.Popen(
        [*command, f"--remote-debugging-port={DEVTOOLS_PORT}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        tab = first_tab()
        tab.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        for page in pages:
            name, _, path = page.partition("=")
            tab.call("Page.navigate", url=base + path)
            time.sleep(SETTLE_S)
            tab.call("Runtime.evaluate", expression=SKIP_DIALOG)
            time.sleep(1)
            shot = tab.call("Page.captureScreenshot", format="png")
            (out / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
            print(out / f"{name}.png")
    finally:
        chromium.terminate()
        chromium.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the webserver's URL")
    parser.add_argument("out", type=Path, help="the folder the PNG files go to")
    parser.add_argument("pages", nargs="+", metavar="NAME=PATH")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    arguments = parser.parse_args()
    shoot(arguments.base.rstrip("/"), arguments.out, arguments.pages, arguments.width, arguments.height)


if __name__ == "__main__":
    main()
