"""How the package is layered (docs/architecture.md, Layers): ``ops <- model <- engine <- api <-
server``; the back ends (``backends``) sit on ``model``, below the engine; ``data``, ``train``
and ``convert`` build on ``model``; the airspace task plugs in
through ``clover.data.task`` and no generic layer imports it; the command line sits on top and
nothing imports it."""

import ast
import subprocess
import sys
from pathlib import Path


def _imported_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_the_python_api_needs_no_web_server():
    """``clover.LLM`` runs the OpenAI layer (``clover.api``) in-process: no ``clover.server``
    module, no FastAPI, uvicorn or Starlette."""
    mods = _imported_after("import clover.api.llm")
    assert "clover.api.prepare" in mods and "clover.api.replies" in mods
    assert [m for m in mods if m == "clover.server" or m.startswith("clover.server.")] == []
    assert [m for m in mods if m.split(".")[0] in ("fastapi", "uvicorn", "starlette")] == []


# -- the import graph, read from the source ---------------------------------------------------------
ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "clover"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path, deferred: bool) -> set[str]:
    """The clover modules ``path`` imports: at module level only, or (``deferred``) also those
    imported inside functions. Imports under ``if TYPE_CHECKING:`` are never run and not counted."""
    found = set()

    def walk(nodes):
        for node in nodes:
            if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:  # "from clover.api import llm" imports the module clover.api.llm
                    found.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not deferred:
                continue
            walk(ast.iter_child_nodes(node))

    walk(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in found if m in MODULES}


def test_no_import_cycles():
    """No clover module imports itself back through others at import time (the imports a module
    defers into a function are left out: they run once everything is loaded)."""
    graph = {m: _imports(p, deferred=False) for m, p in MODULES.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [m])
    assert cycles == []


def _part(module: str) -> str:
    """``clover.engine.batch`` → ``engine``; a top-level module is its own part (``cli``, ``evaluate``)."""
    return module.split(".")[1] if "." in module else "clover"


# what each part may import, deferred imports included (docs/architecture.md, Layers: ops <- model <-
# backends <- engine <- api <- server; data, train and convert build on model; a task such as
# airspace plugs in through clover.data.task; the command line on everything)
MAY_IMPORT = {
    "ops": set(),
    "model": {"ops"},
    "backends": {"ops", "model"},  # what runs a model (llama.cpp), behind the contract the engine drives
    "data": {"ops", "model"},
    "engine": {"ops", "model", "backends"},
    "api": {"ops", "model", "backends", "data", "engine"},  # clover.LLM and checkpoint loading included
    "server": {"clover", "ops", "model", "backends", "data", "engine", "api"},  # "clover": the package's version
    "train": {"ops", "model", "data"},
    "convert": {"ops", "model", "data"},
    "export": {"ops", "model", "backends", "data", "convert"},  # convert: the weight copy it shares; backends: q4_k
    # a task sits beside the command line: it may use any library layer, never a command
    "airspace": {"ops", "model", "backends", "data", "engine", "api", "train"},
    # what the benchmarks measure, with their registry and table/JSON helpers: a task's too, the
    # exported files the other back ends (llama.cpp, SGLang) run, and conversion's own parameters
    "bench": {"ops", "model", "backends", "data", "engine", "api", "train", "convert", "export", "airspace"},
}
GENERIC = ("ops", "model", "backends", "data", "engine", "api", "server", "train", "convert", "export")


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for m, path in MODULES.items():
        part = _part(m)
        if part in MAY_IMPORT:
            wrong += [(m, n) for n in _imports(path, deferred=True) if _part(n) not in MAY_IMPORT[part] | {part}]
    assert wrong == []


def test_no_generic_layer_imports_the_airspace_task():
    """ops, model, engine, api and server (and data, train, convert) reach the airspace demo only
    through the task seam, ``clover.data.task``, which imports a task's module by the name
    ``TASKS`` gives it, on first use; so importing the server loads no task."""
    wrong = [
        (m, n)
        for m, path in MODULES.items()
        if _part(m) in GENERIC
        for n in _imports(path, deferred=True)
        if _part(n) == "airspace"
    ]
    assert wrong == []
    loaded = _imported_after("import clover.server.app, clover.api.llm")
    assert not [m for m in loaded if m.startswith("clover.airspace")]


def test_the_task_seam_finds_airspace_by_name():
    from clover.data.task import get_task, model_task
    from clover.model import preset

    task = get_task("airspace")
    assert task.name == "airspace" and {t["function"]["name"] for t in task.tools()} >= {"recall_drone"}
    # a model that names no task gets the bundled model's (DEFAULT_TASK: airspace; airspace2 its former name)
    assert model_task(preset("tiny")) is None and model_task(preset("tiny"), default=True) is get_task("airspace2")
    assert model_task(preset("tiny", extra={"recipe": "airspace-ar"})) is task


def test_nothing_in_the_library_imports_a_command():
    """The command line sits on top: only ``clover.cli`` (and ``__main__``) and the command
    modules themselves import ``clover.cli`` or ``clover.commands``."""
    front = {"clover.cli", "clover.__main__"} | {m for m in MODULES if m.startswith("clover.commands")}
    wrong = [
        (m, n)
        for m, path in MODULES.items()
        if m not in front
        for n in _imports(path, deferred=True)
        if n == "clover.cli" or n == "clover.commands" or n.startswith("clover.commands.")
    ]
    assert wrong == []
