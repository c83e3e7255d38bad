"""``clover serve`` in a subprocess on loopback, for the benchmarks that measure through HTTP
(``clover bench serve``, ``clover bench agent --http``, ``benchmarks/bench_latency.py``): the
command as a user runs it, on a port the system picks (the banner names it), stopped at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

BANNER = re.compile(r"clover serve: (http://\S+?)\s")


def _wait_for_url(proc: subprocess.Popen, what: str, timeout_s: float) -> str:
    """The URL the server's banner names, once ``/health`` answers 200 there; SystemExit when it
    exits or does not come up within ``timeout_s``. Its stderr goes on to ours."""
    found: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            m = BANNER.search(line)
            if m and not found:
                found.append(m.group(1))
            else:
                sys.stderr.write(line)

    threading.Thread(target=read, daemon=True).start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"{what}: the server exited with {proc.returncode}")
        if found:
            try:
                with urllib.request.urlopen(found[0] + "/health", timeout=1) as r:
                    if r.status == 200:
                        return found[0]
            except OSError:
                pass
        time.sleep(0.1)
    raise SystemExit(f"{what}: the server did not come up within {timeout_s:.0f} s")


@contextmanager
def served(flags: list[str], threads: int | None, what: str, timeout_s: float = 120) -> Iterator[str]:
    """``clover serve --host 127.0.0.1 --port 0 FLAGS`` (and ``--threads``, with OMP_NUM_THREADS
    to match) running for the block; yields its URL (``http://127.0.0.1:PORT``)."""
    cmd = [sys.executable, "-m", "clover", "serve", "--host", "127.0.0.1", "--port", "0", *flags]
    env = dict(os.environ)
    if threads:
        cmd += ["--threads", str(threads)]
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        yield _wait_for_url(proc, what, timeout_s)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
