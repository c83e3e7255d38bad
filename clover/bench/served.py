"""``clover serve`` in a process of its own on loopback, as a user runs it, for what measures or
tests through HTTP (``clover bench serve``, ``clover bench agent --http``,
``benchmarks/bench_latency.py``, ``benchmarks/soak.py``, the response store's crash test): on a
port the system picks (the banner names it), ready once ``/health`` answers, then stopped (or
killed, with no cleanup) and its resident memory read meanwhile."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BANNER = re.compile(r"clover serve: (http://\S+?)\s")


class ServeProcess:
    """``with ServeProcess(["--responses-db", db]) as srv: srv.url``: ``clover serve --host
    127.0.0.1 --port 0 FLAGS`` (the bundled model unless the flags name another; ``threads``:
    ``--threads`` and OMP_NUM_THREADS to match). The server's log lines go to ``log`` (a file,
    appended) or to this process's stderr. RuntimeError when it exits or is not ready within
    ``start_s``."""

    def __init__(self, flags=(), threads: int | None = 1, log: str | Path | None = None, start_s: float = 120):
        cmd = [sys.executable, "-m", "clover", "serve", "--host", "127.0.0.1", "--port", "0", *map(str, flags)]
        env = dict(os.environ)
        if threads:
            cmd += ["--threads", str(threads)]
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        self._log = open(log, "a", encoding="utf-8") if log else sys.stderr
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        self._found: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.url = self._wait_ready(start_s)
        except BaseException:
            self.kill()
            raise
        self.port = int(self.url.rsplit(":", 1)[1])

    def _read(self) -> None:
        for line in self.proc.stderr:
            m = BANNER.search(line)
            if m and not self._found:
                self._found.append(m.group(1))
            else:
                self._log.write(line)
                self._log.flush()

    def _wait_ready(self, start_s: float) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < start_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clover serve exited with {self.proc.returncode} before it was ready")
            if self._found:
                try:
                    with urllib.request.urlopen(self._found[0] + "/health", timeout=2) as r:
                        if r.status == 200:
                            return self._found[0]
                except OSError:  # not listening yet (URLError), or 503 while the engine starts (HTTPError)
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"clover serve was not ready in {start_s:.0f} s")

    def rss_mib(self) -> float:
        """The server's resident set (VmRSS)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crash."""
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
        self._reader.join(5)  # the log's last lines, before the file closes
        if self._log is not sys.stderr:
            self._log.close()


@contextmanager
def served(flags: list[str], threads: int | None, what: str, timeout_s: float = 120) -> Iterator[str]:
    """A :class:`ServeProcess` running for the block; yields its URL (``http://127.0.0.1:PORT``).
    SystemExit naming ``what`` when the server does not come up."""
    try:
        srv = ServeProcess(flags, threads=threads, start_s=timeout_s)
    except RuntimeError as e:
        raise SystemExit(f"{what}: {e}") from None
    with srv:
        yield srv.url
