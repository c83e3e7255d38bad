"""Budget-aware closing: structured output that ends within ``max_tokens``.

A grammar guarantees a text's shape only if the text can end in time: a model that opens a
string under a schema and never closes it runs to ``max_tokens`` and returns text that does not
parse. So, for a grammar state, this module finds the **shortest ending** (the fewest bytes that
make the text complete: close the open string, write the required properties' smallest values,
close every open array and object) and the fewest tokens that spell it, the stop token included.
While the tokens left under ``max_tokens`` are still far more than that (``HORIZON``), the
grammar alone decides; closer to the end, a token may come next only if an ending still fits
after it, so when the tokens left are just enough, only the shortest path remains. A text ends
at ``length`` only when even the shortest ending never fitted, and the engine refuses such a
request up front (``check``).

The shortest ending is built frame by frame (``_pieces``: for each kind of frame, the bytes that
finish it at least cost), each piece checked by the grammar itself (``Grammar.advance``); a
string under a pattern or format, a bounded number and a regular expression are searched byte by
byte (``_search``, bounded). A state whose ending is not found (an unknown frame kind, a search
past its bound) is left unconstrained, as before. ``tests/engine/test_closing.py`` compares the
ending with a brute-force breadth-first search over every byte. A grammar may name the bytes an
ending begins with (``ending_head``) and the state an ending is costed from (``closing_state``):
a grounded reply's word under way (``clover.engine.reply_grounding``).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import deque
from fractions import Fraction

from clover.engine.grammar.budget import work_time
from clover.engine.grammar.frames import GStr, Key, Obj, State, Val
from clover.engine.grammar.json_schema import str_body

HORIZON = 64  # tokens: with more than this left beyond the shortest ending, the grammar alone decides
MAX_PIECES = 4096  # pieces in one ending (a deep schema's required structure), past it: unknown
SEARCH_STATES = 2000  # states one byte search may visit (pattern strings, bounded numbers, regexes)
BREADTH_STATES = 500  # of them breadth-first (the shortest ending), before a depth-first walk
SEARCH_DEPTH = 256  # bytes deep a depth-first search goes
# and the CPU time one search may take (a pattern that backtracks cannot stall the engine): this
# thread's own less its garbage collections (``budget.work_time``), so neither a machine busy
# with other programs nor a full collection in a large process cuts a search short
SEARCH_BUDGET_S = 0.25
NEW_STATES = 64  # states whose ending one ``restrict`` may work out; tokens leading elsewhere are left out
_DEFAULT_ALPHABET = b"0aA_-. x1"  # besides a pattern's own bytes: what character classes usually admit

# what is worked out is kept by the grammar it describes (``Grammar.endings``, ``.smallest``,
# ``.costs``, ``.ranks``: bounded, least recently used out first) and by the token table
# (``TokenTable.spelling``)
_UNKNOWN = object()


# -- bytes ---------------------------------------------------------------------------------------
def shortest_ending(g, state) -> bytes | None:
    """The fewest bytes after which ``state`` is complete (``b""``: it is already), or None where
    they are not found."""
    out = g.endings.get(state, _UNKNOWN)
    if out is not _UNKNOWN:
        return out
    out, st = b"", state
    head = getattr(g, "ending_head", None)  # bytes an ending begins with (a reply's word under way)
    if head is not None and (out := head(state)):
        st = g.advance(state, out)
    for _ in range(MAX_PIECES):
        if st is None:
            out = None
            break
        if g.complete(st):
            break
        for piece in _pieces(g, st):
            nxt = g.advance(st, piece) if piece is not None else None
            if nxt is not None:
                out, st = out + piece, nxt
                break
        else:
            out = None
            break
    else:
        out = None
    g.endings[state] = out
    return out


def _pieces(g, state) -> list[bytes | None]:
    """Candidate bytes that finish the top frame (or its next step) at least cost, best first."""
    stack = state.stack
    if not stack:
        return []
    f, rest = stack[-1], stack[:-1]
    kind = f.kind
    if kind == "lit":
        return [f.lit[f.i :]]
    if kind == "val":
        return [smallest_value(g, f.node)]
    if kind == "str":
        if f.esc != 0:
            return [_escape_end(f.esc)]
        if f.options is None:
            return [b'"']
        return [o[len(f.typed) :] + b'"' for o in sorted(f.options, key=len) if o.startswith(f.typed)]
    if kind == "lstr":
        if f.esc != 0:
            return [_escape_end(f.esc)]
        return [b"a" * max(0, f.lo - f.count) + b'"']
    if kind == "key":
        return _key_pieces(g, f)
    if kind == "obj":
        return _object_pieces(g, f)
    if kind == "arr":
        node = g.nodes[f.node]
        short = f.count < node.get("min_items", 0)
        if f.phase == "after":
            return [b"," if short else b"]"]
        if f.phase == "open" and not short:
            return [b"]"]
        return [smallest_value(g, node["items"])]
    alone = State((f,), 0)  # the top frame by itself
    if kind in ("num", "inum", "fnum", "lits"):
        ends = []
        if g.complete(alone):  # it may end: what follows finishes the frame below
            ends = _pieces(g, State(rest, 0))
        if kind == "lits":
            return ends + [
                o[len(f.typed) :] for o in sorted(f.options, key=len) if o.startswith(f.typed) and o != f.typed
            ]
        return ends + [_search(g, alone, b"0123456789.-+eE")]
    if kind == "pstr":
        return [_search(g, alone, _string_alphabet(g.nodes[f.node]))]
    if kind == "re":
        return [_search(g, alone, g.regexes[f.index].pattern.encode() + _DEFAULT_ALPHABET)]
    if kind == "alt":
        table = g.tables[f.table]
        options = []
        for lit, _ in table:
            if lit.startswith(f.typed):
                after = g.advance(state, lit[len(f.typed) :])
                tail = None if after is None else shortest_ending(g, after)
                if tail is not None:
                    options.append((len(lit) + len(tail), lit[len(f.typed) :]))
        return [p for _, p in sorted(options)]
    if kind == "gstr":
        return _grounded_ending(g, f)
    if kind == "free":  # a trigger begun: any byte that breaks it
        return [bytes([b]) for b in b" x\n" if b != f.trigger[f.matched] and b != f.trigger[0]][:1]
    return []  # a frame kind this module does not know: no ending claimed


def _grounded_ending(g, f: GStr) -> list[bytes]:
    """A grounded string's shortest way to end: the rest of the shortest span still possible
    (escaped as the grammar writes it), then the closing quote. Within ``SEARCH_BUDGET_S`` (a
    long source has many spans): past it, the shortest found so far (a valid ending)."""
    if f.esc:
        return []  # inside an escape: no ending claimed
    ix = g.by_key[f.key]
    if f.until >= 0:  # its end was chosen (``Grammar.hold``): the rest of that span
        best = ix.copied(f.lo, f.until)[f.depth :]
    else:
        best = ix.shortest_rest(f.lo, f.hi, f.depth, work_time() + SEARCH_BUDGET_S)
    if best is None:
        return []
    body = b"".join(b"\\\\" if c == 0x5C else b"\\u%04x" % c if c < 0x20 else bytes([c]) for c in best)
    return [body + b'"']


def _escape_end(esc: int) -> bytes:
    """The bytes that finish an escape or a UTF-8 character begun inside a string."""
    if esc < 0:
        return b"\x80" * -esc
    return b"n" if esc == 1 else b"0" * (6 - esc)


def _key_pieces(g, f: Key) -> list[bytes]:
    """An object key begun: finish it as the key whose value and remaining required keys cost least."""
    node, seen, typed = g.nodes[f.node], f.seen, f.typed
    if f.esc != 0:
        return [_escape_end(f.esc)]
    options = []
    for k in node.get("props", {}):
        body = str_body(k)
        if k not in seen and body.startswith(typed):
            value = smallest_value(g, node["props"][k])
            if value is not None:
                need = _required_cost(g, node, seen | {k})
                options.append((len(body) + len(value) + need, body[len(typed) :] + b'"'))
    if node.get("extra") is not None:
        options.append((len(typed), b'"'))
        options += [(len(typed) + 1, c + b'"') for c in b"_x0"]  # the typed key is taken: one more byte
    return [p for _, p in sorted(options)]


def _required_cost(g, node, seen) -> int:
    total = 0
    for k in node.get("required", ()):
        if k not in seen:
            v = smallest_value(g, node["props"][k])
            total += 4 + len(str_body(k)) + (len(v) if v is not None else 1 << 20)
    return total


def _object_pieces(g, f: Obj) -> list[bytes]:
    seen, phase = f.seen, f.phase
    node = g.nodes[f.node]
    missing = [k for k in node.get("required", ()) if k not in seen]
    if phase == "colon":
        return [b":"]
    if phase == "after":
        return [b"," if missing else b"}"]
    if phase == "open" and not missing:
        return [b"}"]
    # a key must come: the required ones in name order (as ``smallest_value`` writes them, so the
    # ending of a state and of the state after its first token agree), else the cheapest there is
    if missing:
        keys = sorted(missing)
    else:
        size = lambda k: len(str_body(k)) + len(smallest_value(g, node["props"][k]) or b"x" * 9999)
        keys = sorted((k for k in node.get("props", {}) if k not in seen), key=size)
    out = [b'"' + str_body(k) + b'"' for k in keys]
    if node.get("extra") is not None:
        out += [b'""', b'"_"']
    return out


def smallest_value(g, nid: int) -> bytes | None:
    """The shortest JSON text valid for schema node ``nid`` (None: none found, or it recurses forever)."""
    memo = g.smallest
    if nid in memo:
        return memo[nid]
    memo[nid] = None  # while computing: a required property that recurses back has no finite value
    node = g.nodes[nid]
    kinds = node["kinds"]
    cands: list[bytes] = list(node.get("literals", ()))
    if "null" in kinds:
        cands.append(b"null")
    if "boolean" in kinds:
        cands.append(b"true")
    if kinds & {"integer", "number"}:
        cands += _number_candidates(node.get("num_bounds"), "number" in kinds)
    if "string" in kinds:
        if "str_enum" in node:
            cands += [b'"' + o + b'"' for o in node["str_enum"]]
        elif {"pattern", "format"} & node.keys():
            found = _search(g, State((Val(nid),), 0), _string_alphabet(node))
            cands += [found] if found is not None else []
        else:
            cands.append(b'"' + b"a" * node.get("min_len", 0) + b'"')
    if "array" in kinds:
        item = smallest_value(g, node["items"]) if node.get("min_items", 0) else b""
        if item is not None:
            cands.append(b"[" + b",".join([item] * node.get("min_items", 0)) + b"]")
    if "object" in kinds:
        parts = [(k, smallest_value(g, node["props"][k])) for k in sorted(node.get("required", ()))]
        if all(v is not None for _, v in parts):
            cands.append(b"{" + b",".join(b'"' + str_body(k) + b'":' + v for k, v in parts) + b"}")
    start = State((Val(nid),), 0)
    best = None
    for c in sorted(cands, key=len):
        st = g.advance(start, c)
        if st is not None and g.complete(st):
            best = c
            break
    memo[nid] = best
    return best


def _string_alphabet(node: dict) -> bytes:
    src = b"".join(rx.pattern.encode() for rx in (node.get("pattern"), node.get("format")) if rx is not None)
    return src + _DEFAULT_ALPHABET + b'"'


def _number_candidates(bounds, fraction: bool) -> list[bytes]:
    """Short numbers near the bounds (the grammar keeps those within them)."""
    out = [b"0", b"1", b"-1"]
    if bounds is None:
        return out
    lo, _, hi, _ = bounds
    for v in (lo, hi):
        if v is None:
            continue
        for k in range(7 if fraction else 1):
            step = Fraction(1, 10**k)
            for x in (v // step * step, v // step * step + step, v // step * step - step):
                text = str(x.numerator) if x.denominator == 1 else f"{float(x):.{k}f}"
                out.append(text.encode())
    return out


def _search(g, state, alphabet: bytes) -> bytes | None:
    """The shortest bytes of ``alphabet`` that complete ``state``: breadth-first while that stays
    small, else the first ending a depth-first walk finds (a valid ending, perhaps not the shortest)."""
    alphabet = bytes(sorted(set(alphabet) - set(range(0x20))))
    seen, queue = {state}, deque([(state, b"")])
    deadline = work_time() + SEARCH_BUDGET_S
    while queue and len(seen) < BREADTH_STATES and work_time() < deadline:
        st, text = queue.popleft()
        for b in alphabet:
            nxt = g.advance(st, bytes([b]))
            if nxt is None or nxt in seen:
                continue
            if g.complete(nxt):
                return text + bytes([b])
            seen.add(nxt)
            queue.append((nxt, text + bytes([b])))
    return _walk(g, state, alphabet, deadline)


def _walk(g, state, alphabet: bytes, deadline: float) -> bytes | None:
    """Depth first, lowest byte first, at most ``SEARCH_DEPTH`` bytes deep and ``SEARCH_STATES`` tried."""
    stack, tried = [(state, b"", iter(alphabet))], 0
    while stack and tried < SEARCH_STATES and work_time() < deadline:
        st, text, todo = stack[-1]
        b = next(todo, None)
        if b is None:
            stack.pop()
            continue
        tried += 1
        nxt = g.advance(st, bytes([b]))
        if nxt is None:
            continue
        if g.complete(nxt):
            return text + bytes([b])
        if len(text) < SEARCH_DEPTH:
            stack.append((nxt, text + bytes([b]), iter(alphabet)))
    return None


# -- tokens --------------------------------------------------------------------------------------
def _fewest_tokens(table, text: bytes) -> list[int] | None:
    """``left[i]``: the fewest tokens that spell ``text[i:]`` (None where no tokens do)."""
    by_bytes, longest = table.spelling
    inf = 1 << 30
    left = [inf] * len(text) + [0]
    for i in range(len(text) - 1, -1, -1):
        for j in range(i + 1, min(len(text), i + longest) + 1):
            if left[j] + 1 < left[i] and text[i:j] in by_bytes:
                left[i] = left[j] + 1
    return None if left[0] >= inf else left


def _costed(g, state):
    """The state whose ending stands for ``state``'s: a grammar's ``closing_state`` where it has
    one (a state less what no ending is worked out from, such as a reply's word under way)."""
    f = getattr(g, "closing_state", None)
    return state if f is None else f(state)


def known(tg, state) -> bool:
    """``cost(tg, state)`` is already worked out."""
    return (tg.t, tg.key, _costed(tg.g, state)) in tg.g.costs


def cost(tg, state) -> int | None:
    """Tokens the shortest ending of ``state`` takes, the stop token included (None: not known)."""
    state = _costed(tg.g, state)
    key = (tg.t, tg.key, state)
    out = tg.g.costs.get(key, _UNKNOWN)
    if out is _UNKNOWN:
        text = shortest_ending(tg.g, state)
        left = None if text is None or not tg.eos else _fewest_tokens(tg.t, text)
        out = None if left is None else left[0] + 1
        tg.g.costs[key] = out
    return out


def path_tokens(tg, state) -> list[int]:
    """The tokens that begin a fewest-token spelling of the shortest ending (EOS where it is empty)."""
    text = shortest_ending(tg.g, state)
    if text is None:
        return []
    if not text:
        return list(tg.eos)
    left = _fewest_tokens(tg.t, text)
    by_bytes, _ = tg.t.spelling
    firsts = [by_bytes[text[:j]] for j in range(1, len(text) + 1) if text[:j] in by_bytes and left[j] + 1 == left[0]]
    return [t for t in firsts if tg.step(state, t) is not None]


def tokens_left(req, pos: int) -> int:
    """Tokens request ``req`` may still emit from block position ``pos`` on (the stop token counts)."""
    return req.params.max_tokens - req.n_generated - (pos - req.gen_lo)


def restrict(tg, state, left: int, ids: list[int]) -> list[int]:
    """``ids`` (the grammar's allowed tokens at ``state``) less those after which no ending fits in
    the ``left - 1`` tokens that remain; the shortest path's tokens where none would."""
    c = cost(tg, state)
    if c is None or left - c >= HORIZON:
        return ids
    costs, tokens = _ranking(tg, state, ids)
    return sorted(tokens[: bisect_right(costs, left - 1)]) or path_tokens(tg, state) or ids


def _ranking(tg, state, ids: list[int]) -> tuple[list[int], list[int]]:
    """The tokens of ``ids`` by the cost of the ending after each (EOS: 0), cheapest first; worked
    out once per state (a free string's state repeats token after token). Only ``NEW_STATES``
    states not met before are worked out: tokens leading past them are left out (inside a pattern
    each token leads to a state of its own; the shortest path is always kept or given)."""
    key = (tg.t, tg.key, state)
    out = tg.g.ranks.get(key)
    if out is not None:
        return out
    eos, pairs, new = set(tg.eos), [], 0
    for t in ids:
        if t in eos:
            pairs.append((0, t))
            continue
        nxt = tg.step(state, t)
        if nxt is None:
            continue
        if not known(tg, nxt):
            if new >= NEW_STATES:
                continue
            new += 1
        cn = cost(tg, nxt)
        if cn is not None:
            pairs.append((cn, t))
    pairs.sort()
    out = tg.g.ranks[key] = ([c for c, _ in pairs], [t for _, t in pairs])
    return out


def fits(tg, state, left: int) -> bool:
    """An ending of ``state`` fits in ``left`` tokens (or none is known: nothing to hold back)."""
    c = cost(tg, state)
    return c is None or c <= left


def check(tg, max_tokens: int) -> str | None:
    """Why ``max_tokens`` cannot hold any complete text of the grammar (None: it can)."""
    c = cost(tg, tg.start)
    if c is None or c <= max_tokens:
        return None
    text = shortest_ending(tg.g, tg.start)
    shown = json.dumps(text.decode("utf-8", "replace"))
    shown = shown if len(shown) <= 80 else shown[:77] + '..."'
    return (
        f"max_tokens {max_tokens} is too small for the requested structured output: its shortest complete "
        f"text, {shown}, takes {c} tokens with the stop token"
    )
