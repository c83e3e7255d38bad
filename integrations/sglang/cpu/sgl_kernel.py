"""A stand-in for ``sgl_kernel``, installed by ``make sglang`` into the SGLang environment on a
machine without a GPU, and nowhere else.

Why it exists: with ``SGLANG_USE_CPU_ENGINE=1`` SGLang imports its CPU ops from ``sgl_kernel``,
whose CPU build is not on the package index (and targets AMX), while the CUDA build fails to
import without a GPU. Clover's path under SGLang on a CPU (``--attention-backend torch_native``,
sampling in PyTorch, Clover's layers in PyTorch) calls none of these ops; SGLang only imports
them. So every attribute here is a function that raises when called: nothing runs silently in
place of a real kernel, and a call names the missing op.
"""

import sys
import types


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise NotImplementedError(
                f"sgl_kernel.{name}: this environment has the CPU stand-in of sgl_kernel (no compiled "
                "SGLang kernels); the op was called on a path that needs them"
            )

        missing.__name__ = name
        return missing


sys.modules[__name__].__class__ = _StandIn
