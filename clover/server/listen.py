"""The listening socket ``clover serve`` (and ``LiveServer``) hands to uvicorn, made here so that
its errors can be told before the model loads and so that every connection it accepts sends
without delay.

A socket made as ``socket.socket(family, SOCK_STREAM)`` has protocol 0, and asyncio turns on
``TCP_NODELAY`` only for accepted sockets whose protocol is ``IPPROTO_TCP``: with protocol 0,
Nagle's algorithm holds a response's body (written after its headers) until the client's delayed
ACK, about 40 ms on every request of a kept-alive connection. So the socket is made with
``IPPROTO_TCP`` (asyncio then sets ``TCP_NODELAY`` on each accepted socket) and the listening
socket has ``TCP_NODELAY`` too (which Linux passes on to the sockets it accepts).
"""

from __future__ import annotations

import errno
import socket


def listen(host: str, port: int) -> tuple[socket.socket | None, str | None]:
    """(a socket listening on ``host:port``, None), or (None, why it cannot be listened on), bound
    as uvicorn binds; ``port`` 0: a free port the system picks (``getsockname()`` names it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.bind((host, port))
        s.listen(2048)
        s.set_inheritable(True)
        return s, None
    except socket.gaierror as e:
        problem = f"--host {host!r}: not a known host name or address ({e.strerror})"
    except OSError as e:
        problem = f"cannot listen on {host}:{port} ({e.strerror})"
        if e.errno == errno.EADDRINUSE:
            problem = f"port {port} on {host} is already in use; stop what listens there or choose another --port"
        elif e.errno == errno.EACCES:
            problem = f"no permission to listen on port {port} (ports below 1024 need root); try --port 8000"
        elif e.errno == errno.EADDRNOTAVAIL:
            problem = f"--host {host}: not an address of this machine"
    s.close()
    return None, problem


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (None: it can)."""
    s, problem = listen(host, port)
    if s is not None:
        s.close()
    return problem
