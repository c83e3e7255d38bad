"""Structured output: generated text constrained to JSON, a JSON Schema, tool calls, a choice of
strings or a regular expression. The package's face is the names below; its modules, one job
each, are listed in docs/architecture.md, Constrained slots and grammars.
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
