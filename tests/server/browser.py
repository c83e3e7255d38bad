"""Drive headless Chromium over the DevTools protocol on a pipe (no extra packages): load a page,
wait (in real time) until a JS condition holds, then take a screenshot and the DOM."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time

_CANDIDATES = ("/usr/bin/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or "")
CHROMIUM = next((p for p in _CANDIDATES if p and os.path.exists(p)), None)


class Chromium:
    def __init__(self, width: int = 1280, height: int = 900):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--remote-debugging-pipe", f"--window-size={width},{height}", "about:blank"]  # fmt: skip
        # the protocol pipe must be fds 3 (in) and 4 (out) in the browser: let a shell place them
        cmd = f'exec "{CHROMIUM}" {" ".join(flags)} 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(["bash", "-c", cmd], pass_fds=(to_chrome_r, from_chrome_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            ready, _, _ = select.select([self._r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        raise TimeoutError(method)

    def page(self, method: str, **params) -> dict:
        return self.send(method, session=self.session, **params)

    def evaluate(self, expression: str):
        return self.page("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str, until: str, timeout: float = 60) -> bool:
        self.page("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(until):
                return True
            time.sleep(0.1)
        return False

    def screenshot(self, path) -> None:
        data = self.page("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        os.close(self._r)
