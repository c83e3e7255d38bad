"""How the package is layered (docs/architecture.md): ``ops <- model <- engine <- api <- server``;
``data``, ``train`` and ``convert`` build on ``model``; the command line sits on top and nothing
imports it."""

import subprocess
import sys


def _imported_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_the_python_api_needs_no_web_server():
    """``clover.LLM`` runs the OpenAI layer (``clover.api``) in-process: no ``clover.server``
    module, no FastAPI, uvicorn or Starlette."""
    mods = _imported_after("import clover.llm")
    assert "clover.api.protocol" in mods
    assert [m for m in mods if m == "clover.server" or m.startswith("clover.server.")] == []
    assert [m for m in mods if m.split(".")[0] in ("fastapi", "uvicorn", "starlette")] == []
