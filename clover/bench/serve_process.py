"""``clover serve`` in a process of its own on loopback: started, waited for, measured, killed
(the soak benchmark and the crash test of the response store)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``with ServeProcess(["--responses-db", db]) as srv: srv.url``: the bundled model unless
    the arguments name another; ready once ``/health`` answers. ``kill()``: SIGKILL, no cleanup."""

    def __init__(self, args: list[str] = (), threads: int = 1, log: str | Path | None = None, start_s: float = 120):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        cmd = [sys.executable, "-m", "clover", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--threads", str(threads), "--log-level", "warning", *map(str, args)]
        self._log = open(log, "ab") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=self._log)
        self._wait_ready(start_s)

    def _wait_ready(self, start_s: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < start_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clover serve exited with {self.proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:  # not listening yet (URLError), or 503 while the engine starts (HTTPError)
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"clover serve was not ready in {start_s} s")

    def rss_mib(self) -> float:
        """The server's resident set (VmRSS)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down gracefully), SIGKILL after 15 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._log is not subprocess.DEVNULL:
            self._log.close()
