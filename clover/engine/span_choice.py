"""Where a grounded string ends, chosen whole: each way a copy may go on, written out, and the
one after which the model is surest the string is complete.

Inside a copy from the request's text (an ``x-grounded`` string), the grammar lets the model end
the string wherever a span ends; token by token, that choice is the next token's probability
alone, and after the first word of a name unlike any the model trained on, the closing quote is
often the likeliest token ("Old Sevilla" for "Old Sevilla Wyr of Fynu"). A grammar built with
``with_sources(..., ends="span")`` has the engine decide it here instead, once per string, at
the first place where the copy may end: each way it may go on (``Grammar.span_ends``: to every
end of every span still possible, ending now included) is written out in the tokens the copy
would be forced to (``TokenGrammar.forced_token``), and the probability that the string closes
right after it (the closing quote in any form the grammar allows there: a quote alone, or with
the JSON after it, ``", "lat": ``) is scored for all of them in one batched model call
(``scoring.continuation_logprobs``, one noisy block per way). The way after which closing is
likeliest is kept (``Grammar.hold``): its bytes are then forced and the string closes after
them. Scoring each way by its tokens' mean or summed log-probability instead was measured and
chose shorter spans (docs/grounding.md, "Where a span ends").
"""

from __future__ import annotations

from clover.engine.scoring import continuation_logprobs


def span_candidates(grammar, state) -> list[tuple[bytes, list[int], list[int]]] | None:
    """Where ``state`` is a copy's end decision: per way it may go on, (its rest's bytes, the
    tokens that write them, the token ids that may close the string after them). None elsewhere."""
    g = grammar.g
    rests = g.span_ends(state)
    if rests is None:
        return None
    out = []
    for rest in rests:
        st, toks = g.hold(state, rest), []
        while (t := grammar.forced_token(st)) is not None:
            toks.append(t)
            st = grammar.step(st, t)
        if grammar.forced_token(st) is None and g.forced(st) == b"" and g.copied(st) == g.copied(state) + rest:
            closing = [i for i in grammar.allowed(st) if i not in grammar.eos]
            if closing:
                out.append((rest, toks, closing))
    return out if len(out) > 1 else None


def choose_end(model, grammar, state, context: list[int], block_size: int):
    """``state`` with its copy's end chosen whole (the module docstring), or ``state`` itself where
    there is nothing to choose. ``context``: every token before the next position (prompt and
    output), in blocks of ``block_size`` from position 0, as the engine lays them out."""
    cands = span_candidates(grammar, state)
    if cands is None:
        return state
    conts, closing = [t for _, t, _ in cands], [c for _, _, c in cands]
    ends = continuation_logprobs(model, context, conts, block_size, closing, final_only=True)
    best = max(range(len(cands)), key=lambda i: (ends[i][0], -i))  # ties: the shortest
    return grammar.g.hold(state, cands[best][0])
