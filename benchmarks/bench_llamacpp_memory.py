"""Resident memory of the llama.cpp back end: a GGUF file loaded into ``libclover`` and one pass
run, measured in a fresh process from /proc/self/status (VmRSS, split into RssAnon, the
process's own memory, and RssFile, pages of mapped files that the kernel may drop and re-read).

    python benchmarks/bench_llamacpp_memory.py [--type f32] [--lib PATH] [--json PATH]

``--lib`` measures another build of the library (one from before the file was mapped, say); the
script calls only the functions every build has. Prints one table row per stage; ``--json`` writes
the result file.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _status() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process in MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(rest.split()[0]) / 1024
    return out


def measure(lib_path: str, gguf: str) -> dict:
    """In this process: RSS before loading, after loading, after one 64-token commit + 32-token denoise pass."""
    lib = ctypes.CDLL(lib_path)
    lib.clover_model_load.restype = ctypes.c_void_p
    lib.clover_model_load.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.clover_cache_new.restype = ctypes.c_void_p
    lib.clover_cache_new.argtypes = [ctypes.c_void_p]
    lib.clover_model_get.restype = ctypes.c_int64
    lib.clover_model_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    i32, f32 = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)
    lib.clover_step.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        i32,
        ctypes.c_int64,
        i32,
        ctypes.c_int64,
        ctypes.c_int64,
        f32,
    ]
    stages = {"before load": _status()}
    m = lib.clover_model_load(gguf.encode(), 1)
    if not m:
        raise SystemExit(f"{gguf}: the library refused it")
    stages["after load"] = _status()
    vocab, bs = lib.clover_model_get(m, b"n_vocab"), 32
    commit = (ctypes.c_int32 * 64)(*[4 + i % 50 for i in range(64)])
    denoise = (ctypes.c_int32 * bs)(*[4] * bs)
    logits = (ctypes.c_float * (bs * vocab))()
    cache = lib.clover_cache_new(m)
    if lib.clover_step(m, cache, commit, 64, denoise, bs, bs, logits) != 0:
        raise SystemExit("the pass failed")
    stages["after a pass"] = _status()
    return stages


def main() -> None:
    from clover.bench.results import Recorder

    rec = Recorder()  # the result file: this command line, its start, the tables printed
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--type", default="f32", help="the GGUF type to export the bundled model in")
    p.add_argument("--lib", help="libclover.so to measure (default: the one `make llama-cpp` built)")
    p.add_argument("--json", metavar="PATH", help="write the result file here")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:  # the measuring process: nothing loaded in it but ctypes and the library
        print(json.dumps(measure(*a.child)))
        return
    from clover.backends.llamacpp import library_path
    from clover.bench import print_table, write_json
    from clover.export.gguf import export_gguf

    lib = a.lib or str(library_path())
    with tempfile.TemporaryDirectory() as d:
        gguf = Path(d) / f"bundled-{a.type}.gguf"
        export_gguf(ROOT / "clover" / "assets" / "default", gguf, a.type)
        size = gguf.stat().st_size / 2**20
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run(
            [sys.executable, __file__, "--child", lib, str(gguf)], capture_output=True, text=True, env=env, check=True
        )
    stages = json.loads(out.stdout)
    print_table(
        rec,
        f"Resident memory in MiB: the bundled model exported at {a.type} ({size:.1f} MiB), in libclover",
        ["stage", "VmRSS", "own memory (RssAnon)", "file pages (RssFile)"],
        [[name, *(f"{s[k]:.1f}" for k in ("VmRSS", "RssAnon", "RssFile"))] for name, s in stages.items()],
    )
    write_json(rec, a.json, {"type": a.type, "file_mib": size, "lib": lib, "stages": stages})


if __name__ == "__main__":
    main()
