"""Decoding passes replayed as captured CUDA graphs (docs/architecture.md, "CUDA graphs").

A pass launches hundreds of kernels, and on a GPU the host's time to launch them can exceed the
GPU's time to run them. A captured graph launches them all in one call. A graph replays fixed
kernels on fixed memory, so everything a pass reads or writes lives here at fixed addresses:

* **buckets**: a batch of R rows runs in the graph of the smallest power of two >= R; the rows
  past R are padding, which no real row reads (each row attends over its own cache row only);
* **the static cache** (``StaticCache``), one per block size: every tensor of the batch's
  ``ModelCache`` with room for the largest bucket met so far and ``width`` attention slots (a
  larger bucket makes a new static cache, and the graphs are captured again). The batch's cache
  moves into it (``hold``): its tensors are copied there and then *are* views of it, so the next
  passes copy nothing but their tokens. A cache made anew (rows joining or leaving, an attention
  cache grown past its room, a commit run eagerly) is copied in again, only the tensors that
  changed;
* **width**: attention reads all ``width`` slots of a row with each row's history and block
  unmasked (``attention.step_mask``), so the history length is a device tensor, not a shape. A
  history that outgrows the width makes a static cache twice as wide, and the graphs are captured
  again (up to ``max_width``; past it, eager);
* **pass kinds**: a denoise pass (reads the cache, writes only the scratch slots past each row's
  history) and the fused commit + denoise pass, whose new states, lengths and clean logits are
  copied back into the static cache for real rows only (``StaticCache.keep``), so padding rows,
  and the warm-up runs before a capture, leave every real row as it was.

Each (pass kind, bucket) of a static cache is captured the first time it is needed, after a
warm-up on a side stream, and replayed afterwards. What graphs cannot take runs eagerly through
``model.step``, and the reason is counted (``DecodeGraphs.stats``) and logged once. ``EagerGraph``
stands in for a CUDA graph on the CPU: it runs the same function through the same static buffers,
so the bucketing, padding and copying are tested without a GPU.
"""

from __future__ import annotations

import logging
from collections import Counter

import torch

from clover.model import CloverForBlockDiffusion, ModelCache
from clover.model.cache import AttnCache

log = logging.getLogger(__name__)

MAX_ROWS = 64  # the largest bucket: a larger batch runs eagerly
MIN_WIDTH = 1024  # attention slots of the first static cache (more as histories grow, by doubling)


def bucket(rows: int, largest: int) -> int | None:
    """The graph batch for ``rows`` rows: the smallest power of two >= rows, None past ``largest``."""
    if rows < 1:
        raise ValueError(f"a pass needs at least one row, got {rows}")
    b = 1 << (rows - 1).bit_length()
    return b if b <= largest else None


def width_for(need: int, max_width: int, min_width: int = MIN_WIDTH) -> int | None:
    """Attention slots for a pass that needs ``need`` (history + its tokens): a power of two, at
    least ``min_width``, at most ``max_width``; None when ``need`` is past ``max_width``."""
    if need > max_width:
        return None
    return min(1 << (max(need, min_width) - 1).bit_length(), max_width)


class CudaGraph:
    """``fn()`` captured as a CUDA graph after ``WARMUP`` runs on a side stream (the first calls of
    a kernel may allocate or autotune, which a capture must not see); ``replay`` returns the same
    output tensor each time, overwritten by each replay. ``pool``: graphs share one memory pool
    (they replay one at a time, each output read before the next replay)."""

    WARMUP = 2

    def __init__(self, fn, pool=None):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls of other threads (a server's) do not invalidate the capture
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.out = fn()

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.out


class EagerGraph:
    """A CUDA graph's stand-in on any device: one warm-up run at capture, as ``CudaGraph``'s, and
    each replay runs ``fn`` again, eagerly, through the same static buffers."""

    def __init__(self, fn, pool=None):
        fn()
        self.fn = fn

    def replay(self) -> torch.Tensor:
        return self.fn()


class StaticCache:
    """A batch's ``ModelCache`` at fixed addresses: ``rows`` rows (a bucket), ``width``
    attention slots per row, the tensors shaped and typed as ``like``'s; the token inputs of each
    pass kind; ``real``, which rows hold the batch (the rest are padding)."""

    def __init__(self, like: ModelCache, rows: int, width: int, block_size: int):
        self.rows, self.width, self.bs = rows, width, block_size
        dev = like.lengths.device
        self.layers: list[dict[str, torch.Tensor]] = []
        self.kinds = [type(c) for c in like.layers]  # AttnCache or GDNCache, layer by layer
        for c in like.layers:
            if isinstance(c, AttnCache):
                shape = (rows, width, *c.k.shape[2:])
                self.layers.append({n: torch.zeros(shape, dtype=c.k.dtype, device=dev) for n in ("k", "v")})
            else:
                zeros = lambda t: torch.zeros(rows, *t.shape[1:], dtype=t.dtype, device=dev)
                self.layers.append({n: zeros(t) for n, t in vars(c).items()})
        self.lengths = torch.zeros(rows, dtype=torch.long, device=dev)
        last = like.last_logits
        self.last = None if last is None else torch.zeros(rows, last.shape[1], dtype=last.dtype, device=dev)
        # tokens per pass kind (committed tokens first): 0 → the denoise block, bs → commit + block
        self.tokens = {n: torch.zeros(rows, n + block_size, dtype=torch.long, device=dev) for n in (0, block_size)}
        self.real = torch.zeros(rows, dtype=torch.bool, device=dev)
        self.graphs: dict[tuple[int, int], CudaGraph | EagerGraph] = {}  # (commit, bucket) → graph
        self.held: ModelCache | None = None  # the batch's cache, whose tensors are views of these
        self._views: dict[int, torch.Tensor] = {}

    def view(self, rows: int) -> ModelCache:
        """A cache over the first ``rows`` rows (views: a pass on it writes here)."""
        layers = [kind(**{n: t[:rows] for n, t in f.items()}) for kind, f in zip(self.kinds, self.layers)]
        last = None if self.last is None else self.last[:rows]
        return ModelCache(layers, self.lengths[:rows], last)

    def _slots(self, cache: ModelCache):
        """(object, attribute, static tensor) for every tensor of ``cache`` a pass reads."""
        for c, f in zip(cache.layers, self.layers):
            for name, full in f.items():
                yield c, name, full
        yield cache, "lengths", self.lengths
        if self.last is not None:
            yield cache, "last_logits", self.last

    def hold(self, cache: ModelCache, top: int) -> None:
        """Move ``cache`` (rows < ``self.rows``, histories of ``top`` tokens at most) here: each of
        its tensors that is not already a view of this cache is copied in (attention: the history
        only) and replaced by the view. A new cache object marks its rows real, the others padding."""
        n = cache.batch_size
        if cache is not self.held:
            self.held, self._views = cache, {}
            self.real.copy_(torch.arange(self.rows, device=self.real.device) < n)
            self.lengths[n:].zero_()  # padding rows: empty histories, in range of any pass
        for i, (obj, name, full) in enumerate(self._slots(cache)):
            cur = getattr(obj, name)
            if self._views.get(i) is cur:
                continue
            if isinstance(obj, AttnCache):
                full[:n, :top].copy_(cur[:, :top])
            else:
                full[:n].copy_(cur)
            self._views[i] = full[:n]
            setattr(obj, name, self._views[i])

    def keep(self, cache: ModelCache, rows: int) -> None:
        """After a fused pass on ``view(rows)``: its new GDN states and conv tails, lengths and clean
        logits (new tensors) copied into the static ones, for real rows only."""
        real = self.real[:rows]
        pairs = [(getattr(c, n), f[n]) for c, f in zip(cache.layers, self.layers) for n in ("S", "tail") if n in f]
        pairs.append((cache.lengths, self.lengths))
        if self.last is not None:
            pairs.append((cache.last_logits, self.last))
        for new, full in pairs:
            dst = full[:rows]
            dst.copy_(torch.where(real.view(-1, *[1] * (new.dim() - 1)), new, dst))


class DecodeGraphs:
    """The engine's decoding passes as CUDA graphs, per block size (a static cache each) and per
    (pass kind, bucket); ``run`` returns None for a pass it leaves to the eager path. ``capture``:
    ``CudaGraph`` on a GPU, ``EagerGraph`` to run the same path on a CPU."""

    def __init__(
        self,
        model: CloverForBlockDiffusion,
        max_rows: int = 16,
        max_width: int | None = None,
        min_width: int = MIN_WIDTH,
        capture=None,
    ):
        if not isinstance(model, CloverForBlockDiffusion):
            raise ValueError(f"CUDA graphs run the PyTorch model, not {type(model).__name__} (a back end of its own)")
        dev, self.dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
        if capture is None:
            if dev.type != "cuda":
                raise ValueError(f"CUDA graphs need the model on a CUDA device; this one is on {dev.type}")
            capture = CudaGraph
        self.model, self.capture = model, capture
        self.largest = bucket(min(max(max_rows, 1), MAX_ROWS), MAX_ROWS)
        self.max_width = max_width  # None: the model's longest context and a pass's tokens
        self.min_width = min_width
        self.caches: dict[int, StaticCache] = {}  # block size → its static cache
        self.mem = torch.cuda.graph_pool_handle() if capture is CudaGraph else None
        self.counts: Counter = Counter()  # graph passes, eager passes, captures
        self.eager_why: Counter = Counter()  # why a pass ran eagerly → passes
        self.failed: set[tuple[int, int, int]] = set()  # (block size, commit, bucket) whose capture failed

    def run(self, cache, x: torch.Tensor, commit: torch.Tensor | None, block_size: int) -> torch.Tensor | None:
        """``model.step(cache, commit, denoise=x)`` through a graph: the logits ``[R, bs, V]``
        (valid until the next replay), or None (run it eagerly; the reason is counted)."""
        n_c = 0 if commit is None else commit.shape[1]
        static, rows, why = self._place(cache, n_c, block_size)
        graph = None
        if why is None and (block_size, n_c, rows) not in self.failed:
            graph = static.graphs.get((n_c, rows)) or self._capture(static, n_c, rows)
        if why is None and graph is None:
            why = "its graph could not be captured (logged)"
        if why is not None:
            self._eager(why)
            return None
        n = cache.batch_size
        tokens = static.tokens[n_c]
        if n_c:
            tokens[:n, :n_c].copy_(commit)
        tokens[:n, n_c:].copy_(x)
        self.counts["graph passes"] += 1
        return graph.replay()[:n]

    def _place(self, cache, n_c: int, bs: int) -> tuple[StaticCache | None, int, str | None]:
        """The static cache and bucket for this pass, the batch's cache moved into it; or why not."""
        if not isinstance(cache, ModelCache):
            return None, 0, "the back end keeps its own cache"
        if n_c not in (0, bs):
            return None, 0, f"a commit of {n_c} tokens (graphs take one block)"
        n = cache.batch_size
        rows = bucket(n, self.largest)
        if rows is None:
            return None, 0, f"a batch over the largest graph bucket ({self.largest} rows)"
        if any(c.k.dtype != self.dtype for c in cache.layers if isinstance(c, AttnCache)):
            return None, 0, "an attention cache kept in another precision than the model"
        if self.model.config.shift_logits and cache.last_logits is None:
            return None, 0, "no clean logit in the cache yet"
        lengths = cache.lengths.tolist()  # the pass's one read of the device, as model.step's
        if any(v % bs for v in lengths):
            raise ValueError(f"cache lengths {lengths} are not block boundaries of {bs}")
        top = max(lengths)
        need = top + n_c + bs
        static = self.caches.get(bs)
        if static is None or need > static.width or rows > static.rows:
            limit = self.max_width or self.model.config.max_position_embeddings + 2 * bs
            width = width_for(max(need, static.width if static else 0), limit, self.min_width)
            if width is None:
                return None, 0, f"a history past the graphs' widest pass ({limit} slots)"
            if static is not None:
                static.graphs.clear()  # they read the old tensors: captured again on the new ones
            static = self.caches[bs] = StaticCache(cache, max(rows, static.rows if static else 0), width, bs)
        static.hold(cache, top)
        return static, rows, None

    def _capture(self, static: StaticCache, n_c: int, rows: int):
        """The graph of one (pass kind, bucket), captured with every row marked padding (the warm-up
        runs commit nothing), or None when capturing fails (said once; that pass kind and bucket run
        eagerly from then on, whatever the width)."""
        model, bs = self.model, static.bs
        T = n_c + bs
        tokens = static.tokens[n_c][:rows]
        fn = model.compiled_pass or CloverForBlockDiffusion._pass

        def run() -> torch.Tensor:
            cache = static.view(rows)
            out = fn(model, cache, tokens, n_c, bs, bs, static.width - T, False)
            if n_c:
                static.keep(cache, rows)
            return out

        real = static.real.clone()
        static.real.zero_()
        try:
            graph = self.capture(run, pool=self.mem)
            self.counts["captures"] += 1
        except Exception as e:  # an operator that syncs with the host, or a kernel a graph cannot take
            what = "the commit + denoise pass" if n_c else "the denoise pass"
            log.warning("clover: CUDA graph of %s at batch %d (block %d) failed, eager instead: %s", what, rows, bs, e)
            self.failed.add((bs, n_c, rows))
            return None
        finally:
            static.real.copy_(real)
        static.graphs[(n_c, rows)] = graph
        return graph

    def _eager(self, why: str) -> None:
        if why not in self.eager_why:
            log.warning("clover: a decoding pass runs without CUDA graphs: %s", why)
        self.eager_why[why] += 1
        self.counts["eager passes"] += 1

    def stats(self) -> dict:
        """Passes replayed, passes run eagerly and why, graphs captured."""
        return {
            "graph_passes": self.counts["graph passes"],
            "graph_captures": self.counts["captures"],
            "graph_eager_passes": self.counts["eager passes"],
            "graph_eager_why": dict(self.eager_why),
        }
