"""Structured output: generated text constrained to JSON, a JSON Schema, tool calls, a choice of
strings or a regular expression (docs/architecture.md, Constrained slots and grammars).

The package's face is the names below; its modules, each with one job:

* ``frames``: the automaton's states and frames, as named types;
* ``automaton``: ``Grammar``, the byte-level pushdown automaton over those states;
* ``scalars``: JSON strings and numbers byte by byte (the rules of their frames);
* ``json_schema``: JSON Schema compiled into the numbered nodes the automaton reads;
* ``regexes``: regular expressions, compiled and matched within a CPU-time budget;
* ``grounding``: the spans and numbers of a request's own text that ``x-grounded`` values copy;
* ``builders``: ``json_grammar``, ``tool_call_grammar``, ``choice_grammar``, ``regex_grammar``;
* ``tokens``: ``TokenTable`` and ``TokenGrammar``, the grammar over a tokenizer's tokens;
* ``closing``: the shortest ending of a state, so a text ends within ``max_tokens``;
* ``budget`` and ``lru``: the clock the budgets count, and the grammars' bounded caches.
"""

from __future__ import annotations

from clover.engine.grammar.automaton import Grammar
from clover.engine.grammar.builders import choice_grammar, json_grammar, regex_grammar, tool_call_grammar
from clover.engine.grammar.json_schema import GrammarError
from clover.engine.grammar.tokens import TokenGrammar, TokenTable

__all__ = [
    "Grammar",
    "GrammarError",
    "TokenGrammar",
    "TokenTable",
    "choice_grammar",
    "json_grammar",
    "regex_grammar",
    "tool_call_grammar",
]
