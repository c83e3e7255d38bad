"""Clover on llama.cpp's ggml, the second back end: a thin ctypes layer over ``libclover``
(``native/llamacpp``, built by ``make llama-cpp``; docs/llama-cpp.md).

``LlamaCppModel(path)`` loads a GGUF file written by ``clover export gguf``; ``step`` runs one pass
as ``CloverForBlockDiffusion.step`` does, batch 1: clean whole blocks to commit (written into the
cache) and/or one block to denoise (read-only), returning the denoise block's logits aligned so
that row i predicts token i. ``quantize`` exposes ggml's own quantizer (``q4_k``, which the gguf
package cannot write). ``LlamaCppClover`` puts the library behind ``CloverForBlockDiffusion``'s
incremental API (``config``, ``new_cache``, ``prefill``, ``step`` on torch tensors, a batch of
rows each with its own native cache, ``LlamaCppRows``), the contract Clover's engine drives.

The library lives in a cache directory keyed by the pinned llama.cpp source (``llamacpp.pin``)
(``${XDG_CACHE_HOME:-~/.cache}/clover/llama.cpp/<pin>/lib/libclover.so``, or
``$CLOVER_LLAMACPP_CACHE/<pin>/…``); ``CLOVER_LLAMACPP_LIB`` names the file directly.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
from pathlib import Path

import numpy as np
import torch

from clover.model.cache import prefill_blocks
from clover.model.config import ATTN, CloverConfig

# the pinned llama.cpp source, the sdist of llama-cpp-python that carries it: llamacpp.pin beside
# this file, which native/llamacpp/build.sh reads too
PIN_FILE = Path(__file__).with_name("llamacpp.pin")


def read_pin(path: Path = PIN_FILE) -> dict[str, str]:
    """The pin file's ``key=value`` lines (``package``, ``version``, ``sha256``); ``#`` comments."""
    pin = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: {line!r} is not key=value")
            pin[key.strip()] = value.strip()
    return pin


_PIN = read_pin()
PIN_PACKAGE, PIN_VERSION, PIN_SHA256 = _PIN["package"], _PIN["version"], _PIN["sha256"]
PIN = f"{PIN_VERSION}-{PIN_SHA256[:12]}"  # the library's cache directory
BUILD_HINT = "build it with `make llama-cpp` (needs g++ and cmake)"
# the policies clover_denoise_block runs in the library (clover.h CLOVER_POLICY_*)
NATIVE_POLICIES = {"ar": 0, "prefix": 1, "threshold": 2}


class LlamaCppError(RuntimeError):
    """The library is missing, or it refused a call (the message says why)."""


class GGUFError(ValueError):
    """A file that is not a Clover GGUF model this back end can run; the message names the file
    and the key or tensor at fault."""


def library_path() -> Path:
    """Where ``make llama-cpp`` puts ``libclover.so`` for the pinned source."""
    if os.environ.get("CLOVER_LLAMACPP_LIB"):
        return Path(os.environ["CLOVER_LLAMACPP_LIB"])
    root = os.environ.get("CLOVER_LLAMACPP_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "clover" / "llama.cpp"
    )
    return Path(root) / PIN / "lib" / "libclover.so"


def _signatures(lib: ctypes.CDLL) -> ctypes.CDLL:
    P, I64, F = ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_float)
    sigs = {
        "clover_last_error": (ctypes.c_char_p, []),
        "clover_model_load": (P, [ctypes.c_char_p, ctypes.c_int]),
        "clover_model_free": (None, [P]),
        "clover_model_set_threads": (None, [P, ctypes.c_int]),
        "clover_model_get": (I64, [P, ctypes.c_char_p]),
        "clover_model_get_float": (ctypes.c_double, [P, ctypes.c_char_p]),
        "clover_model_meta": (ctypes.c_char_p, [P, ctypes.c_char_p]),
        "clover_cache_new": (P, [P]),
        "clover_cache_free": (None, [P]),
        "clover_cache_copy": (P, [P]),
        "clover_cache_length": (I64, [P]),
        "clover_cache_nbytes": (I64, [P]),
        # the token and logits buffers as addresses (c_void_p): a pass hands over ints, with no
        # ctypes pointer object made per buffer and per row
        "clover_step": (ctypes.c_int, [P, P, P, I64, P, I64, I64, P]),
        "clover_denoise_block": (
            ctypes.c_int,
            [P, P, P, I64, P, P, P, I64, I64, P, I64, ctypes.c_int, ctypes.c_float, P, P],
        ),
        "clover_quantize": (ctypes.c_size_t, [ctypes.c_char_p, F, P, I64, I64]),
        "clover_quantized_size": (ctypes.c_size_t, [ctypes.c_char_p, I64, I64]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


@functools.cache
def load_library() -> ctypes.CDLL:
    """The built ``libclover`` (loaded once); a LlamaCppError that says how to build it when absent."""
    path = library_path()
    if not path.exists():
        raise LlamaCppError(f"the llama.cpp back end is not built ({path} is missing): {BUILD_HINT}")
    try:
        return _signatures(ctypes.CDLL(str(path)))
    except (OSError, AttributeError) as e:
        raise LlamaCppError(f"{path}: cannot load ({e}); rebuild it: {BUILD_HINT}") from None


def available() -> str | None:
    """None when the library loads, else the reason it does not."""
    try:
        load_library()
    except LlamaCppError as e:
        return str(e)
    return None


def _error(lib: ctypes.CDLL) -> str:
    return (lib.clover_last_error() or b"").decode("utf-8", "replace") or "unknown error"


def _tokens(x) -> np.ndarray:
    """Token ids (a list, numpy array or torch tensor of shape [n] or [1, n]) as int32 [n]."""
    if x is None:
        return np.zeros(0, dtype=np.int32)
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim == 2:
        if a.shape[0] != 1:
            raise ValueError(f"the llama.cpp back end runs batch 1; got {a.shape[0]} rows")
        a = a[0]
    if a.ndim != 1:
        raise ValueError(f"tokens must be [n] or [1, n], got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.int32)


def _rows(x, n: int) -> torch.Tensor:
    """Token ids of a batch (a torch tensor or array ``[n, k]``) as one C-contiguous int32 tensor."""
    t = torch.as_tensor(x).detach().to("cpu", torch.int32).contiguous()
    if t.ndim != 2 or t.shape[0] != n:
        raise ValueError(f"tokens must be [{n}, k] for {n} cache rows, got shape {tuple(t.shape)}")
    return t


def _contiguous(a) -> bool:
    return a.is_contiguous() if isinstance(a, torch.Tensor) else a.flags["C_CONTIGUOUS"]


def _address(a) -> int | None:
    """The first byte of a numpy array or torch tensor (None for None or an empty one)."""
    if a is None or not len(a):
        return None
    return a.data_ptr() if isinstance(a, torch.Tensor) else a.ctypes.data


class LlamaCppCache:
    """One sequence's committed history in the library (attention K/V, GDN states and conv tails)."""

    def __init__(self, lib: ctypes.CDLL, handle: int):
        self._lib, self._h = lib, handle

    @property
    def length(self) -> int:
        """Committed tokens (a multiple of the block size while decoding)."""
        return int(self._lib.clover_cache_length(self._h))

    def nbytes(self) -> int:
        """Bytes the library holds for this history (keys, values, states, conv tails, kept logit)."""
        return int(self._lib.clover_cache_nbytes(self._h))

    def copy(self) -> LlamaCppCache:
        h = self._lib.clover_cache_copy(self._h)
        if not h:
            raise LlamaCppError(f"cannot copy a cache: {_error(self._lib)}")
        return LlamaCppCache(self._lib, h)

    def close(self) -> None:
        if self._h:
            self._lib.clover_cache_free(self._h)
            self._h = None

    def __del__(self):
        self.close()


class LlamaCppModel:
    """A Clover GGUF file loaded into ``libclover`` for CPU passes, batch 1."""

    def __init__(self, path: str | Path, threads: int = 1):
        self._lib = load_library()
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such GGUF file")
        # the library checks the whole file (keys, every tensor's name, shape, type and extent)
        # before it keeps it: a file it refuses is a GGUFError naming what is wrong
        h = self._lib.clover_model_load(str(path).encode(), int(threads))
        if not h:
            raise GGUFError(_error(self._lib))
        self._h = h
        self.path = Path(path)
        self.vocab_size = self.get("n_vocab")
        self.block_size = self.get("block_size")
        self.max_block_size = self.get("max_block_size")
        self.shift_logits = bool(self.get("shift_logits"))
        self.mask_token_id = self.get("mask_token_id")

    def get(self, name: str) -> int:
        """An integer hyper-parameter as the library read it from the file's keys (clover.h
        names them: ``n_vocab``, ``n_head``, ``is_attention.3`` …); -1 for an unknown name."""
        return int(self._lib.clover_model_get(self._h, name.encode()))

    def get_float(self, name: str) -> float:
        """A float hyper-parameter as the library read it (``eps``, ``rope_base``)."""
        return float(self._lib.clover_model_get_float(self._h, name.encode()))

    def metadata(self, key: str) -> str | None:
        """A string metadata value of the file (``clover.config``, ``tokenizer.huggingface.json`` …)."""
        v = self._lib.clover_model_meta(self._h, key.encode())
        try:
            return None if v is None else v.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: metadata key {key} is not UTF-8 text ({e})") from None

    def set_threads(self, threads: int) -> None:
        self._lib.clover_model_set_threads(self._h, int(threads))

    def new_cache(self) -> LlamaCppCache:
        h = self._lib.clover_cache_new(self._h)
        if not h:
            raise LlamaCppError(f"cannot make a cache: {_error(self._lib)}")
        return LlamaCppCache(self._lib, h)

    def step(self, cache: LlamaCppCache, commit=None, denoise=None, block_size: int | None = None) -> np.ndarray | None:
        """One pass: ``commit`` (clean whole blocks, written to ``cache``) then ``denoise`` (one
        block, read-only), both starting where the cache ends. Returns the denoise block's logits
        ``[n_denoise, vocab]`` (float32, row i predicts token i), or None when nothing is denoised.
        A request the model cannot take (a block size past its maximum, a commit that is not whole
        blocks before a denoise, a token outside the vocabulary) is a ValueError."""
        bs = self.block_size if block_size is None else block_size
        c, d = _tokens(commit), _tokens(denoise)
        out = np.empty((len(d), self.vocab_size), dtype=np.float32) if len(d) else None
        self.step_into(cache, c, d, bs, out)
        return out

    def step_into(self, cache: LlamaCppCache, commit, denoise, block_size: int, out) -> None:
        """``step`` on int32 tokens ``[n]`` (C-contiguous numpy arrays or torch tensors), the logits
        written into ``out``: a C-contiguous float32 array or tensor of ``[n_denoise, vocab]`` (None
        when nothing is denoised), so a batch's rows land in one tensor with no copy between."""
        bs = block_size
        if not isinstance(bs, int) or isinstance(bs, bool):
            raise ValueError(f"block_size must be a positive integer, got {bs!r}")
        n_d = len(denoise)
        if n_d and (out is None or tuple(out.shape) != (n_d, self.vocab_size)):
            raise ValueError(f"internal: a logits buffer of shape {None if out is None else tuple(out.shape)}")
        for a, dtype in ((commit, "int32"), (denoise, "int32"), (out, "float32")):
            if a is not None and (str(a.dtype).rpartition(".")[2] != dtype or not _contiguous(a)):
                raise ValueError(f"internal: a {a.dtype} buffer where the library reads C-contiguous {dtype}")
        rc = self._lib.clover_step(
            self._h, cache._h, _address(commit), len(commit), _address(denoise), n_d, bs, _address(out)
        )
        if rc != 0:
            raise ValueError(_error(self._lib))

    def denoise_block(
        self,
        cache: LlamaCppCache,
        commit: np.ndarray,
        x: np.ndarray,
        open_: np.ndarray,
        wanted: np.ndarray,
        block_size: int,
        stop: np.ndarray,
        policy: str,
        threshold: float,
    ) -> tuple[np.ndarray, int, float]:
        """One block decoded to its end in the library, greedily (``clover_denoise_block``, clover.h):
        the first pass commits ``commit`` (whole blocks, int32, may be empty) and denoises the block
        ``x`` (int32 ``[n]``, updated in place), each later pass denoises it, and after each pass
        ``policy`` (``NATIVE_POLICIES``) commits some of the open positions, until no position is
        both open (``open_``, bool ``[n]``) and needed (``wanted`` and not after a committed token
        of ``stop``, int32). Returns the pass that committed each position (int32 ``[n]``, -1:
        none), the passes run and the CPU seconds of the passes themselves."""
        if policy not in NATIVE_POLICIES:
            raise ValueError(f"the library's block loop runs {', '.join(NATIVE_POLICIES)}, not {policy!r}")
        n = len(x)
        for a, dtype in ((commit, "int32"), (x, "int32"), (stop, "int32"), (open_, "bool"), (wanted, "bool")):
            if a.dtype != dtype or not a.flags["C_CONTIGUOUS"] or (a is not commit and a is not stop and len(a) != n):
                raise ValueError(f"internal: a {a.dtype} buffer of {len(a)} where the library reads {n} {dtype}")
        pass_of = np.empty(n, dtype=np.int32)
        seconds = ctypes.c_double(0.0)
        passes = self._lib.clover_denoise_block(
            self._h,
            cache._h,
            _address(commit),
            len(commit),
            x.ctypes.data,
            open_.ctypes.data,
            wanted.ctypes.data,
            n,
            block_size,
            _address(stop),
            len(stop),
            NATIVE_POLICIES[policy],
            threshold,
            pass_of.ctypes.data,
            ctypes.addressof(seconds),
        )
        if passes < 0:
            raise ValueError(_error(self._lib))
        return pass_of, passes, seconds.value

    def close(self) -> None:
        if getattr(self, "_h", None):
            self._lib.clover_model_free(self._h)
            self._h = None

    def __del__(self):
        self.close()


def quantize(array: np.ndarray, type: str) -> np.ndarray:
    """ggml's quantizer: float rows (the last axis) → the type's blocks as uint8 ``[..., row bytes]``
    (the shape ``gguf.GGUFWriter.add_tensor`` takes with ``raw_dtype``)."""
    lib = load_library()
    a = np.ascontiguousarray(array, dtype=np.float32)
    n = a.shape[-1]
    rows = a.size // n if n else 0
    size = lib.clover_quantized_size(type.encode(), rows, n)
    if not size:
        raise ValueError(f"cannot quantize rows of {n} values to {type}")
    out = np.empty(size, dtype=np.uint8)
    got = lib.clover_quantize(
        type.encode(), a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.ctypes.data_as(ctypes.c_void_p), rows, n
    )
    if got != size:
        raise LlamaCppError(_error(lib))
    return out.reshape(*a.shape[:-1], size // rows)


class LlamaCppRows:
    """The caches of a batch of sequences, one native cache per row, with the row interface the
    engine drives (as ``ModelCache``'s): ``lengths``, ``batch_size``, ``select`` (copies),
    ``keep`` (the rows themselves, for a holder that drops this object), ``cat`` (takes the rows
    as they are), ``commit_rows`` (some rows commit a block alone), ``nbytes``. Each row's clean
    logit of Rule 4 lives in its native cache, so ``last_logits`` reads None and ignores writes."""

    def __init__(self, rows: list[LlamaCppCache]):
        self.rows = list(rows)
        self.layers: list = []

    @property
    def lengths(self) -> torch.Tensor:
        return torch.tensor([r.length for r in self.rows], dtype=torch.long)

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    @property
    def last_logits(self) -> None:
        return None

    @last_logits.setter
    def last_logits(self, value) -> None:
        pass

    def select(self, rows) -> LlamaCppRows:
        return LlamaCppRows([self.rows[int(i)].copy() for i in torch.as_tensor(rows).reshape(-1).tolist()])

    def keep(self, rows) -> LlamaCppRows:
        """The rows ``rows`` as they are, not copied: for a holder that drops this object at once
        (the engine's batch when requests leave), so the rows that stay are not copied each time
        one leaves; ``select`` gives copies."""
        return LlamaCppRows([self.rows[int(i)] for i in torch.as_tensor(rows).reshape(-1).tolist()])

    @staticmethod
    def cat(caches: list[LlamaCppRows]) -> LlamaCppRows:
        return LlamaCppRows([r for c in caches for r in c.rows])

    def commit_rows(self, model: LlamaCppClover, rows: torch.Tensor, tokens: torch.Tensor, block_size: int) -> None:
        """Commit ``tokens[i]`` (one clean block) onto row ``rows[i]`` only; the other rows stay as
        they are. Each row has its own native cache, so the rows commit in place."""
        for i, r in enumerate(torch.as_tensor(rows).reshape(-1).tolist()):
            model.native.step(self.rows[r], commit=tokens[i], block_size=block_size)

    def nbytes(self) -> int:
        """Bytes the library holds for these rows."""
        return sum(r.nbytes() for r in self.rows)


class LlamaCppClover:
    """A Clover GGUF file behind ``CloverForBlockDiffusion``'s incremental API: ``config`` (the
    file's ``clover.config``), ``new_cache``, ``prefill``, ``step`` with torch tensors ``[B, n]``.
    Each row of a batch runs its own pass on its own native cache (the library is batch 1). The
    engine reads ``device`` and ``dtype`` (where its tensors live: the CPU, f32 logits)."""

    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, path: str | Path, threads: int = 1, native_loop: bool = True):
        """``native_loop``: the engine hands the requests the library's block loop covers to
        ``denoise_blocks`` (``clover.engine.native_loop``); False keeps every pass in Python."""
        self.native = LlamaCppModel(path, threads)
        self.native_loop = native_loop
        self.config = read_config(self.native)
        self.path = self.native.path

    def tokenizer_files(self) -> dict[str, str]:
        """The checkpoint's tokenizer files as the GGUF file carries them (``tokenizer.json`` from
        ``tokenizer.huggingface.json``, ``tokenizer_config.json`` from ``clover.tokenizer_config``,
        ``chat_template.jinja`` from ``tokenizer.chat_template``): name → text, those present."""
        keys = {
            "tokenizer.json": "tokenizer.huggingface.json",
            "tokenizer_config.json": "clover.tokenizer_config",
            "chat_template.jinja": "tokenizer.chat_template",
        }
        files = {name: self.native.metadata(key) for name, key in keys.items()}
        return {name: text for name, text in files.items() if text}

    def eval(self) -> LlamaCppClover:
        return self

    def new_cache(self, batch: int = 1, capacity: int = 0) -> LlamaCppRows:
        return LlamaCppRows([self.native.new_cache() for _ in range(batch)])

    def step(self, cache: LlamaCppRows, commit=None, denoise=None, block_size: int | None = None):
        """As ``CloverForBlockDiffusion.step``: returns the denoise logits ``[B, n_d, V]`` or None."""
        bs = self.config.check_block_size(self.config.block_size if block_size is None else block_size)
        if commit is None and denoise is None:
            raise ValueError("step needs tokens to commit or to denoise")
        bad = [n for n in cache.lengths.tolist() if n % bs]
        if bad:  # checked for every row before any row runs
            raise ValueError(f"cache lengths {cache.lengths.tolist()} are not block boundaries of {bs}")
        c = None if commit is None else _rows(commit, len(cache.rows))
        d = None if denoise is None else _rows(denoise, len(cache.rows))
        none = torch.zeros(0, dtype=torch.int32)
        out = None if d is None else torch.empty(d.shape[0], d.shape[1], self.config.vocab_size)
        for i, row in enumerate(cache.rows):  # each row's logits written in place into out[i]
            ci = none if c is None else c[i]
            di = none if d is None else d[i]
            self.native.step_into(row, ci, di, bs, None if out is None or not len(di) else out[i])
        return out

    def denoise_blocks(
        self,
        cache: LlamaCppRows,
        commits: list,
        x: torch.Tensor,
        open_: torch.Tensor,
        wanted: torch.Tensor,
        stop_ids: torch.Tensor,
        policies: list[str],
        threshold: torch.Tensor,
        block_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Each row's active block decoded to its end in the library (``LlamaCppModel.denoise_block``,
        greedy): ``commits[i]`` (a row's clean blocks to commit first, or None), the blocks ``x``,
        ``open_`` (masked) and ``wanted`` ``[R, bs]``, ``stop_ids`` ``[R, S]`` (-1 padded), and per
        row its policy's name (``NATIVE_POLICIES``) and threshold. Returns the
        blocks ``[R, bs]``, the pass (of this call) that committed each position ``[R, bs]`` (-1:
        none) and the passes each row ran."""
        bs = self.config.check_block_size(block_size)
        xs = x.to(torch.int32).numpy().copy()
        op, wa = np.ascontiguousarray(open_.numpy()), np.ascontiguousarray(wanted.numpy())
        stops, taus = stop_ids.tolist(), threshold.tolist()
        none = np.zeros(0, dtype=np.int32)
        pass_of, passes = np.empty_like(xs), []
        self.pass_seconds = 0.0  # the passes' own CPU time in this call (clover.bench.stages reads it)
        for i, row in enumerate(cache.rows):
            c = none if commits[i] is None else np.ascontiguousarray(torch.as_tensor(commits[i]).reshape(-1), np.int32)
            stop = np.array([t for t in stops[i] if t >= 0], dtype=np.int32)
            pass_of[i], n, sec = self.native.denoise_block(row, c, xs[i], op[i], wa[i], bs, stop, policies[i], taus[i])
            passes.append(n)
            self.pass_seconds += sec
        return torch.from_numpy(xs).long(), torch.from_numpy(pass_of).long(), passes

    def prefill(self, prompt: torch.Tensor, block_size: int | None = None, cache: LlamaCppRows | None = None):
        """Commit the prompt's complete blocks (Rule 1); returns the cache and the prompt's tail."""
        return prefill_blocks(self, prompt, block_size, cache)


def read_config(native: LlamaCppModel) -> CloverConfig:
    """The file's ``clover.config`` JSON as a CloverConfig, checked against the hyper-parameters
    the library read from the GGUF keys (the graph runs on those, the engine on the config: they
    must agree). Anything wrong is a GGUFError naming the file and the key."""
    path = native.path
    raw = native.metadata("clover.config")
    if raw is None:
        raise GGUFError(f"{path}: no clover.config metadata (re-export it with `clover export gguf`)")
    try:
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object, got {type(d).__name__}")
        config = CloverConfig.from_dict(d)
    except (ValueError, TypeError) as e:  # bad JSON, a ConfigError, a field of the wrong kind
        raise GGUFError(f"{path}: metadata key clover.config: {e}") from None
    wrong = config_mismatches(config, native)
    if wrong:
        raise GGUFError(f"{path}: clover.config disagrees with the GGUF keys: {'; '.join(wrong)}")
    return config


def config_mismatches(c: CloverConfig, native: LlamaCppModel) -> list[str]:
    """Where the config and the library's hyper-parameters (from the GGUF keys) differ, one
    ``name: config X, file Y`` each."""
    attn = [t == ATTN for t in c.layer_types]
    want = {
        "n_vocab": c.vocab_size,
        "n_layer": c.num_hidden_layers,
        "n_embd": c.hidden_size,
        "block_size": c.block_size,
        "max_block_size": c.max_block_size,
        "shift_logits": int(c.shift_logits),
        "mask_token_id": c.mask_token_id,
        "n_expert": c.num_experts,
        "n_expert_used": c.num_experts_per_tok if c.num_experts else 0,
        "n_attention": sum(attn),
    }
    if any(attn):
        want.update(
            n_head=c.num_attention_heads,
            n_head_kv=c.num_key_value_heads,
            head_dim=c.head_dim,
            rope_dims=int(c.head_dim * c.partial_rotary_factor),
        )
    if not all(attn):
        want.update(
            conv_k=c.linear_conv_kernel_dim,
            hk=c.linear_num_key_heads,
            hv=c.linear_num_value_heads,
            dk=c.linear_key_head_dim,
            dv=c.linear_value_head_dim,
            right_conv=int(c.gdn_right_conv),
            calibration=int(c.gdn_block_calibration),
        )
    if c.num_experts:
        want.update(n_ff_exp=c.moe_intermediate_size, n_ff_shexp=c.shared_expert_intermediate_size)
    else:
        want.update(n_ff=c.intermediate_size)
    wrong = [f"{k}: config {v}, file {native.get(k)}" for k, v in want.items() if native.get(k) != v]
    if sum(attn) == want["n_attention"] and native.get("n_layer") == len(attn):
        wrong += [
            f"layer {i}: config {'attention' if a else 'gdn'}, file the other"
            for i, a in enumerate(attn)
            if native.get(f"is_attention.{i}") != int(a)
        ]
    if c.gdn_block_mixing != "bidirectional":
        wrong.append(f"gdn_block_mixing: config {c.gdn_block_mixing!r}, file 'bidirectional'")
    if c.quantization is not None:
        wrong.append("quantization: config has a header, file holds GGUF types")
    floats = {"eps": c.rms_norm_eps} | ({"rope_base": c.rope_theta} if any(attn) else {})
    wrong += [
        f"{k}: config {v}, file {native.get_float(k)}"
        for k, v in floats.items()
        if np.float32(v) != np.float32(native.get_float(k))
    ]
    return wrong
