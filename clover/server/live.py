"""A real uvicorn server on loopback in a background thread (tests, ``clover bench serve``), on a
socket made as ``clover serve`` makes its own (``clover.server.listen``)."""

from __future__ import annotations

import threading
import time

import uvicorn

from clover.server.listen import listen


class LiveServer:
    """``with LiveServer(app) as srv: srv.url`` — port 0 lets the OS pick a free port."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, lifespan="on", timeout_graceful_shutdown=3, ws="none"
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.sock, problem = listen(host, port)
        if problem:
            raise OSError(problem)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="clover-uvicorn", daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() - t0 > 60:
                self.sock.close()
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
