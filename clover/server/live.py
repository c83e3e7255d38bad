"""A real uvicorn server on loopback in a background thread (tests, ``clover bench serve``)."""

from __future__ import annotations

import threading
import time

import uvicorn


class LiveServer:
    """``with LiveServer(app) as srv: srv.url`` — port 0 lets the OS pick a free port."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, lifespan="on", timeout_graceful_shutdown=3, ws="none"
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.thread = threading.Thread(target=self.server.run, name="clover-uvicorn", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() - t0 > 60:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
