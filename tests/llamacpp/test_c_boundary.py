"""No call into ``libclover`` can abort its host: a null model, cache or buffer, an unknown
hyper-parameter name, a quantization type that ggml would assert on (one that needs an importance
matrix, or has no quantizer) each return the function's error value with a reason. Run in a
child process, so that an abort fails this test rather than ending the test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import ctypes, math
import numpy as np
from clover.backends.llamacpp import load_library, _error

lib = load_library()
f32 = ctypes.POINTER(ctypes.c_float)
i32 = ctypes.POINTER(ctypes.c_int32)
assert lib.clover_model_load(None, 1) is None and "no path" in _error(lib)
assert lib.clover_cache_new(None) is None and lib.clover_cache_copy(None) is None
assert lib.clover_cache_length(None) == -1 and lib.clover_cache_nbytes(None) == -1
assert lib.clover_model_get(None, b"n_vocab") == -1 and math.isnan(lib.clover_model_get_float(None, b"eps"))
assert lib.clover_model_meta(None, b"clover.config") is None
assert lib.clover_step(None, None, None, 4, None, 0, 4, None) == -1 and "null" in _error(lib)
x, flags = np.zeros(4, dtype=np.int32), np.ones(4, dtype=np.uint8)
assert lib.clover_denoise_block(None, None, None, 0, x.ctypes.data, flags.ctypes.data, flags.ctypes.data, 4, 4,
                                None, 0, 1, 0.9, x.ctypes.data, None) == -1 and "null" in _error(lib)
rows = np.ones((2, 256), dtype=np.float32)
out = np.empty(4096, dtype=np.uint8)
src, dst = rows.ctypes.data_as(f32), out.ctypes.data_as(ctypes.c_void_p)
for kind in (b"iq2_xxs", b"iq1_s", b"i32", b"f64", b"nonsense"):
    assert lib.clover_quantized_size(kind, 2, 256) == 0, kind
    assert lib.clover_quantize(kind, src, dst, 2, 256) == 0 and "cannot quantize" in _error(lib), kind
assert lib.clover_quantize(b"q8_0", src, dst, 2, 256) == lib.clover_quantized_size(b"q8_0", 2, 256) > 0
assert lib.clover_quantize(None, src, dst, 2, 256) == 0
print("ok")
"""


def test_the_c_api_returns_errors_instead_of_aborting(libclover):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-3000:])
