"""The grammar package's structure: frames read by name only, no module reading another's
private names, and the span index's public reads (``common_bytes``, ``shortest_rest``) against a
brute-force reading of the spans."""

import ast
import random
from pathlib import Path

import pytest

from clover.engine.grammar import frames
from clover.engine.grammar.grounding import SpanIndex

from .test_grounding import TEXTS, brute_spans

ENGINE = Path(__file__).parents[2] / "clover" / "engine"
PACKAGE = ENGINE / "grammar"
# names the engine's code gives a state or a frame (and the attributes that hold a state)
FRAME_NAMES = {"state", "st", "start", "nxt", "f", "top", "frame", "g", "child"}
STATE_ATTRS = {"start_state", "gstate"}


@pytest.mark.parametrize("cls", [frames.State, *frames.FRAMES], ids=lambda c: c.__name__)
def test_a_frame_is_a_tuple_read_by_name_only(cls):
    values = tuple(range(len(cls._fields) - (cls is not frames.State)))
    x = cls(*values)
    with pytest.raises(TypeError, match="by field name"):
        x[0]
    with pytest.raises(TypeError, match="by field name"):
        x[-1]
    assert hash(x) == hash(tuple(x)) and x == tuple(x)  # hashed and compared as the tuple it is
    assert getattr(x, cls._fields[0]) == 0
    if cls is not frames.State:
        assert x.kind == cls._field_defaults["kind"]


def test_frames_of_different_kinds_never_compare_equal():
    bounds = (None, False, None, False)
    assert frames.INum(bounds, b"1") != frames.FNum(bounds, b"1")
    assert len({f._field_defaults["kind"] for f in frames.FRAMES}) == len(frames.FRAMES)


def frame_reads_by_index(path: Path) -> list[str]:
    """Integer subscripts on what holds a frame or a state: ``x[-1][k]`` (a stack's top),
    ``f[k]``, ``state[k]`` and the other names in ``FRAME_NAMES``, ``g.start_state[k]``. Lists, bytes
    and stacks read by other names are not caught (``stack[-1]``, ``lit[i]``, ``options[0]``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Subscript):
            continue
        idx = node.slice
        if isinstance(idx, ast.UnaryOp) and isinstance(idx.op, ast.USub):
            idx = idx.operand
        if not (isinstance(idx, ast.Constant) and isinstance(idx.value, int)):
            continue
        v = node.value
        top_of_stack = isinstance(v, ast.Subscript) and ast.unparse(v.slice) == "-1"
        named = isinstance(v, ast.Name) and v.id in FRAME_NAMES
        held = isinstance(v, ast.Attribute) and v.attr in STATE_ATTRS
        if top_of_stack or named or held:
            out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_frame_or_state_is_read_by_index_in_the_engine():
    found = [hit for path in sorted(ENGINE.rglob("*.py")) for hit in frame_reads_by_index(path)]
    assert not found, found


def private_reads(path: Path) -> list[str]:
    """Private names (``_x``) this module reads but does not define: imported from another module
    (``from m import _x``), or read as an attribute (``obj._x``) where no function, class or
    assignment of this module names ``_x``."""
    tree = ast.parse(path.read_text())
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out += [f"{path.name}:{node.lineno}: {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = node.attr
            if name.startswith("_") and not name.startswith("__") and name not in own:
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_of_the_grammar_reads_another_modules_private_names():
    found = [hit for path in sorted(PACKAGE.glob("*.py")) for hit in private_reads(path)]
    found = [hit for hit in found if not hit.endswith(("._fields", "._field_defaults"))]  # namedtuple's API
    assert not found, found


def brute_common(spans: set[bytes], typed: bytes, most: int) -> bytes:
    """What every span beginning with ``typed`` goes on with, up to where one may end."""
    alive = [s for s in spans if s.startswith(typed)]
    out = b""
    while len(out) < most:
        here = typed + out
        if here and here in alive:
            break
        nxt = {s[len(here)] for s in alive if len(s) > len(here)}
        if len(nxt) != 1:
            break
        out += bytes(nxt)
    return out


def test_common_bytes_and_shortest_rest_agree_with_the_spans():
    rng = random.Random(5)
    for text in TEXTS:
        ix, spans = SpanIndex(text), {s.encode() for s in brute_spans(text)}
        for _ in range(60):
            span = rng.choice(sorted(spans))
            typed = span[: rng.randrange(len(span) + 1)]
            lo, hi = 0, len(ix)
            for depth, c in enumerate(typed):
                lo, hi = ix.narrow(lo, hi, depth, c)
            most = rng.choice([1, 3, 64])
            assert ix.common_bytes(lo, hi, len(typed), most) == brute_common(spans, typed, most), (text, typed)
            rest = ix.shortest_rest(lo, hi, len(typed), float("inf"))
            longer = [s for s in spans if s.startswith(typed) and len(s) > len(typed) or typed and s == typed]
            assert typed + rest in spans and len(typed + rest) == min(map(len, longer)), (text, typed)
