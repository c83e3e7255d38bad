"""A bounded map that forgets its least recently used entry first, owned by what it describes.

Each grammar and token table keeps its own (``Grammar``, ``TokenGrammar``, ``closing``), so
one request's states never push out another grammar's, and an entry lives only as long as the
object it describes. A lock makes one lookup or insertion whole: the engine thread and the
threads that prepare requests may use the same grammar's maps.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

_MISSING = object()


class LRU:
    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError("an LRU map needs maxsize >= 1")
        self.maxsize = maxsize
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        """The value (now the most recently used), or ``default``."""
        with self._lock:
            value = self._d.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._d.move_to_end(key)
            return value

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._d

    def __setitem__(self, key, value) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)
