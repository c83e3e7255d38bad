"""Drive headless Chromium over the DevTools protocol on a pipe (no extra packages): load a page,
wait (in real time) until a JS condition holds, then take a screenshot and the DOM."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib

_CANDIDATES = ("/usr/bin/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or "")
CHROMIUM = next((p for p in _CANDIDATES if p and os.path.exists(p)), None)
NO_CHROMIUM = "no chromium binary (apt-get install chromium)"


def need_chromium() -> None:
    """Skip the calling test where no Chromium is installed, with the reason; with
    ``CLOVER_REQUIRE_BROWSER=1`` (CI, which installs it) fail it instead, so the browser tests
    never pass by skipping there."""
    import pytest

    if CHROMIUM is None:
        if os.environ.get("CLOVER_REQUIRE_BROWSER") == "1":
            pytest.fail(NO_CHROMIUM + ", and CLOVER_REQUIRE_BROWSER=1 asks for the browser tests")
        pytest.skip(NO_CHROMIUM + "; CI installs it")


class Chromium:
    def __init__(self, width: int = 1280, height: int = 900):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        # the protocol pipe must be fds 3 (in) and 4 (out) in the browser: let a shell place them
        cmd = f'exec "{CHROMIUM}" {" ".join(flags)} 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", cmd],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
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


def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """An 8-bit RGB or RGBA PNG (what Chromium's screenshots are) → (width, height, bytes per
    pixel, rows of raw pixel bytes), its scanline filters undone as the PNG specification says."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), "not a PNG"
    at, idat, head = 8, b"", None
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at : at + 8])
        chunk = data[at + 8 : at + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        at += 12 + n
    width, height, depth, color, _, _, interlace = head
    assert depth == 8 and color in (2, 6) and interlace == 0, head
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytes(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colours_in(data: bytes, box: tuple[float, float, float, float] | None = None) -> int:
    """How many distinct colours a PNG has, inside ``box`` (x, y, width, height in pixels) if given."""
    width, height, bpp, rows = png_pixels(data)
    x0, y0, w, h = box if box is not None else (0, 0, width, height)
    x0, y0 = max(0, int(x0)), max(0, int(y0))
    x1, y1 = min(width, int(x0 + w)), min(height, int(y0 + h))
    return len({row[x * bpp : (x + 1) * bpp] for row in rows[y0:y1] for x in range(x0, x1)})
