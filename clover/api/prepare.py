"""An OpenAI chat or text completion request made ready for the engine: checked against the
model's limits, its chat template rendered, its prompt tokenised, its sampling parameters and
grammar chosen (``Prepared``). Phrasing the engine's answer back in OpenAI's shapes is
``clover.api.replies``.

The chat template is ``clover.data.chat``; this module only decides what to render and what the
output must follow.

``tool_choice``: ``none`` renders no tools and parses none; ``auto`` renders them and parses
whatever calls come out; a named function prefills ``<tool_call>{"name": "NAME`` (cut before the
closing quote, so the tokens are exactly those of the trained canonical call); ``required``
with one tool is that tool named; with several it prefills ``<tool_call>{"name": "``. Both
decode under a grammar (``clover.engine.grammar``): only offered names, arguments valid for
the function's JSON Schema, further calls only where ``parallel_tool_calls`` allows. Under
``auto`` the model writes freely, and a call it opens is held to the same grammar.
``response_format`` ``json_object`` / ``json_schema`` (or vLLM's ``guided_json`` /
``guided_choice`` / ``guided_regex``, SGLang's ``regex``: ``structured.request_grammar``)
constrains the answer the same way, on chat and text completions alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from pydantic import ValidationError

from clover.api.errors import bad_request, from_validation, too_large
from clover.api.schemas import ChatRequest, CompletionRequest, NamedToolChoice, Sampling, TokenizeRequest
from clover.api.settings import block_size_problem, decoding_values
from clover.api.structured import NAME_OPEN, modern_message, request_grammar, tools_grammar
from clover.data.chat import IM_END, TOOL_CLOSE, TOOL_OPEN, render_chat
from clover.data.task import reply_vocabulary as task_reply_vocabulary
from clover.engine import SamplingParams
from clover.engine.grammar import Grammar
from clover.engine.grammar.grounding import source_texts
from clover.engine.reply_grounding import ReplyGrammar, reply_sources


@dataclass
class Limits:
    max_prompt_tokens: int
    context: int  # max_position_embeddings: prompt + generated
    max_block_size: int
    block_size: int  # the model's default
    vocab_size: int = 0
    max_tools: int = 128
    default_max_tokens: int = 256
    max_token_bytes: int = 0  # the longest token's bytes (0: not known): a text over the limit is refused unread
    # () -> the model's task's reply vocabulary, or None where it has none (grounded replies' words)
    reply_vocabulary: Callable[[], frozenset[str] | None] | None = None


@dataclass
class Prepared:
    prompt_ids: list[int]
    params: SamplingParams
    prefill: str = ""  # assistant text already placed in the prompt (tool_choice required / named)
    block_size: int = 0
    max_calls: int | None = None  # parallel_tool_calls=false: 1
    tool_names: frozenset[str] | None = None  # the functions on offer (None: no tools); a call to another stays text
    legacy: bool = False  # the request used the deprecated functions/function_call: answer in that shape

    @property
    def parse_tools(self) -> bool:
        return self.tool_names is not None


MAX_CHOICES = 16  # n × prompts in one request
MAX_STOP = 16  # stop sequences in one request


def check_common(req: Sampling, limits: Limits) -> None:
    if req.n is not None and not 1 <= req.n <= MAX_CHOICES:
        raise bad_request(f"n={req.n} is out of range: 1..{MAX_CHOICES} choices per request", "n")
    if isinstance(req.stop, list) and len(req.stop) > MAX_STOP:
        raise bad_request(f"stop has {len(req.stop)} sequences; at most {MAX_STOP} are accepted", "stop")
    if problem := block_size_problem(req.block_size, limits.max_block_size):
        raise bad_request(problem, "block_size")


def chat_prompt(req: ChatRequest, tokenizer, limits: Limits) -> tuple[str, str, frozenset[str] | None, Grammar | None]:
    """→ (prompt text incl. prefill, prefill, the tool names on offer or None when no tools are
    rendered (no calls parsed), the grammar the output must follow or None). The grammar's
    x-grounded values are not drawn yet: ``grounded`` does that once the prompt's length is checked."""
    tools = _offered_tools(req, limits)
    grammar, asked = request_grammar(req)
    choice = req.tool_choice or "auto"
    prefill = ""
    names = list(dict.fromkeys(t["function"]["name"] for t in tools or []))
    if choice == "required":
        if not tools:
            raise bad_request("tool_choice 'required' needs a non-empty tools list", "tool_choice")
        if len(names) == 1:
            choice = NamedToolChoice(type="function", function={"name": names[0]})
        else:
            prefill = TOOL_OPEN + NAME_OPEN
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in names:
            raise bad_request(f"tool_choice names function {name!r}, which is not in tools", "tool_choice")
        prefill = f"{TOOL_OPEN}{NAME_OPEN}{name}"
        names = [name]
    if prefill and grammar is not None:
        raise bad_request(f"{asked} (structured output) cannot be combined with tool_choice required or named", asked)
    if tools and choice != "none" and grammar is None:  # calls: offered names, arguments valid for their schemas
        grammar = tools_grammar(tools, names, prefill, req.parallel_tool_calls is not False)
    if choice == "none":
        tools = None
    text = _render_chat(req, tools, prefill, getattr(tokenizer, "chat_template", None))
    return text, prefill, frozenset(t["function"]["name"] for t in tools) if tools else None, grammar


def grounded(req: ChatRequest, grammar: Grammar | None, prefill: str) -> Grammar | None:
    """The grammar with its x-grounded values drawn from this conversation (its span index built:
    call it once the prompt is known to fit, so a source is never longer than the model reads)."""
    if grammar is None or req.grounded is False:
        return grammar
    grammar = grammar.with_sources(source_texts(chat_messages(req)))
    if prefill and not grammar.can_call():
        raise bad_request(
            "tool_choice asks for a call, but no offered tool can be called: a required x-grounded "
            "argument has no value in the conversation to copy (send grounded: false to decode "
            "without grounding)",
            "tool_choice",
        )
    return grammar


def reply_grammar(grammar: Grammar | None, messages: list[dict], prefill: str, structured: str | None, vocabulary=None):
    """``grounded_reply``: the reply's id runs held to those of the user turns and tool results
    (``clover.engine.reply_grounding``), and with a ``vocabulary`` its words to it and theirs,
    around the calls of ``tool_choice: auto``'s grammar. A turn that must call (``tool_choice``
    required or named) has no reply in words to hold: as it was. Structured output is JSON, not a
    reply in words: a 400."""
    if structured is not None:
        raise bad_request(f"grounded_reply holds a reply in words; it cannot be combined with {structured}", structured)
    if prefill:
        return grammar
    return ReplyGrammar(reply_sources(messages), grammar, TOOL_OPEN if grammar is not None else "", vocabulary)


def reply_vocabulary(req: ChatRequest, limits: Limits) -> frozenset[str] | list[str] | None:
    """The words a grounded reply may write besides the conversation's (None: any word): the
    request's ``reply_words`` list; true, or left out, the model's task's reply vocabulary (left
    out, none where the task ships none; true, a 400 then); false, None."""
    if req.reply_words is False:
        return None
    if isinstance(req.reply_words, list):
        return req.reply_words
    task_words = limits.reply_vocabulary() if limits.reply_vocabulary is not None else None
    if task_words is None and req.reply_words is True:
        raise bad_request(
            "reply_words: true asks for the model's task's reply vocabulary, and this model's task ships none; "
            "send the words (a list) or leave the field out",
            "reply_words",
        )
    return task_words


def encode_prompt(text: str, tokenizer, limits: Limits, param: str) -> list[int]:
    """The prompt's token ids; a text whose bytes need more tokens than the server accepts even
    at the longest token each (``Limits.max_token_bytes``) is refused (413) before it is read."""
    if limits.max_token_bytes and len(text) > limits.max_prompt_tokens:  # a character is at least a byte
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.max_prompt_tokens * limits.max_token_bytes:
            raise too_large(
                f"the prompt is {size} bytes, at least {-(-size // limits.max_token_bytes)} tokens; "
                f"this server accepts at most {limits.max_prompt_tokens}",
                code="prompt_too_long",
                param=param,
            )
    return tokenizer.encode(text)


def longest_token_bytes(tokenizer) -> int:
    """The most bytes one token of ``tokenizer`` stands for (0 where it cannot say)."""
    try:
        return max(len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size))
    except (AttributeError, TypeError, ValueError):
        return 0


def _render_chat(req: ChatRequest, tools: list[dict] | None, prefill: str, template: str | None = None) -> str:
    """The prompt text: the conversation and the assistant's header (then a tool-call prefill), or
    with vLLM's ``continue_final_message`` the last assistant message left open to be continued
    (the answer is the continuation only)."""
    messages = chat_messages(req)
    cont = bool(req.continue_final_message)
    if cont and req.add_generation_prompt:
        raise bad_request(
            "continue_final_message and add_generation_prompt cannot both be true", "continue_final_message"
        )
    if not cont:
        gen = req.add_generation_prompt is not False
        return render_chat(messages, tools, gen, template) + prefill
    if messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        raise bad_request(
            "continue_final_message needs the last message to be an assistant message with text "
            "(the beginning of the answer)",
            "continue_final_message",
        )
    if prefill:
        raise bad_request(
            "continue_final_message cannot be combined with tool_choice required or named", "continue_final_message"
        )
    text = render_chat(messages, tools, False, template)
    return text[: -len(IM_END + "\n")]  # the final turn stays open


def prepare_chat(req: ChatRequest, tokenizer, limits: Limits, stop_token_ids: list[int] | None) -> Prepared:
    """A chat request → its prompt ids and sampling parameters (grammar, prefill, stops): what
    ``/v1/chat/completions`` and ``clover.LLM.chat`` run; every problem is an APIError."""
    check_common(req, limits)
    text, prefill, tool_names, grammar = chat_prompt(req, tokenizer, limits)
    ids = encode_prompt(text, tokenizer, limits, "messages")
    prep = prepare(req, ids, limits, stop_token_ids, req.max_completion_tokens or req.max_tokens)
    prep.prefill, prep.tool_names, prep.legacy = prefill, tool_names, req.legacy_functions
    grammar = grounded(req, grammar, prefill)
    if req.grounded_reply:
        vocabulary = reply_vocabulary(req, limits)
        grammar = reply_grammar(grammar, chat_messages(req), prefill, request_grammar(req)[1], vocabulary)
    elif req.reply_words is not None:
        raise bad_request("reply_words holds a grounded reply's words: it needs grounded_reply: true", "reply_words")
    with_grammar(prep, grammar)
    if prep.parse_tools and req.parallel_tool_calls is False:  # one call: stop right after it
        prep.max_calls = 1
        prep.params.stop = [*prep.params.stop, TOOL_CLOSE]
    return prep


def chat_messages(req: ChatRequest) -> list[dict]:
    """The request's messages as the chat template reads them (text parts joined, legacy forms modernised)."""
    return [modern_message(_text_parts(m.model_dump(exclude_none=True), i)) for i, m in enumerate(req.messages)]


def tokenize_request(req: TokenizeRequest, tokenizer, limits: Limits, model_name: str) -> list[int]:
    """``/tokenize`` (vLLM's): a prompt's token ids, or a chat's (``messages``, or ``prompt`` as a
    list of messages) as ``/v1/chat/completions`` would render it (``add_generation_prompt``:
    ending with the assistant's header, the default; ``continue_final_message``: the last
    assistant message left open)."""
    if (req.prompt is None) == (req.messages is None):
        raise bad_request("give either prompt (text, or a chat's messages) or messages (a chat)", "prompt")
    if isinstance(req.prompt, str):
        return tokenizer.encode(req.prompt)
    messages = req.messages if req.messages is not None else req.prompt
    cont = req.continue_final_message
    body = {"model": model_name, "messages": messages, "tools": req.tools, "continue_final_message": cont}
    try:  # continue_final_message: no generation prompt (vLLM asks for add_generation_prompt false too)
        chat = ChatRequest.model_validate({**body, "add_generation_prompt": req.add_generation_prompt and not cont})
    except ValidationError as e:
        raise from_validation(e.errors(include_url=False)) from None
    return tokenizer.encode(
        _render_chat(chat, _offered_tools(chat, limits), "", getattr(tokenizer, "chat_template", None))
    )


def _offered_tools(req: ChatRequest, limits: Limits) -> list[dict] | None:
    """The request's tools as dicts (None: no tools), at most ``limits.max_tools`` of them."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    if tools and len(tools) > limits.max_tools:
        raise bad_request(f"too many tools: {len(tools)} given, at most {limits.max_tools}", "tools", "too_many_tools")
    return tools


def chat_stop_ids(tokenizer) -> list[int] | None:
    """Chats end at ``<|im_end|>`` (the model's eos) or ``<|endoftext|>``, whichever comes first."""
    eot = tokenizer.token_to_id("<|endoftext|>") if hasattr(tokenizer, "token_to_id") else None
    return [eot] if eot is not None else None


def model_limits(
    config, max_prompt_tokens: int | None = None, max_tools: int = 128, default_max_tokens: int = 256, tokenizer=None
) -> Limits:
    """The request bounds for a model: its context, block sizes and vocabulary (and with its
    tokenizer, the longest token: a prompt far over the limit is refused without tokenising it)."""
    context = config.max_position_embeddings
    return Limits(
        max_prompt_tokens=min(max_prompt_tokens or context - 1, context - 1),
        context=context,
        max_block_size=config.max_block_size,
        block_size=config.block_size,
        vocab_size=config.vocab_size,
        max_tools=max_tools,
        default_max_tokens=default_max_tokens,
        max_token_bytes=longest_token_bytes(tokenizer) if tokenizer is not None else 0,
        reply_vocabulary=partial(task_reply_vocabulary, config),
    )


def _text_parts(m: dict, i: int) -> dict:
    """A message whose content parts are all text. An assistant's ``refusal`` part (OpenAI's own
    answers carry them, and clients send them back) reads as its text; images, audio, files are refused."""
    if not isinstance(m.get("content"), list):
        return m
    parts = []
    for part in m["content"]:
        kind = part.get("type", "text")
        key = "refusal" if kind == "refusal" and m["role"] == "assistant" else "text"
        if kind != key:
            raise bad_request(
                f"messages[{i}]: content part type {kind!r} is not supported: this model reads text only",
                f"messages.{i}.content",
            )
        if not isinstance(part.get(key), str):
            raise bad_request(
                f"messages[{i}]: a {kind!r} content part needs {key!r} as a string", f"messages.{i}.content"
            )
        parts.append({**part, "type": "text", "text": part[key]})
    return {**m, "content": parts}


def completion_prompts(req: CompletionRequest, tokenizer, limits: Limits) -> list[list[int]]:
    """The request's prompts as token ids: a string, a list of token ids, or a batch of either."""
    if req.suffix:
        raise bad_request("suffix is not supported", "suffix")
    if req.best_of not in (None, req.n or 1):  # every sample drawn is returned: none is ranked away
        raise bad_request(
            f"best_of={req.best_of} is not supported: this server returns every sample it draws, so "
            f"best_of must equal n ({req.n or 1})",
            "best_of",
        )
    p = req.prompt
    batch = [p] if isinstance(p, str) or (p and all(isinstance(x, int) for x in p)) else list(p)
    if not batch:
        raise bad_request("the prompt is empty", "prompt")
    if len(batch) * (req.n or 1) > MAX_CHOICES:
        raise bad_request(
            f"{len(batch)} prompts × n={req.n or 1} is more than {MAX_CHOICES} choices per request", "prompt"
        )
    out = []
    for q in batch:
        if isinstance(q, str):
            out.append(encode_prompt(q, tokenizer, limits, "prompt"))
            continue
        if limits.vocab_size and not all(0 <= x < limits.vocab_size for x in q):
            raise bad_request(f"prompt token ids must lie in [0, {limits.vocab_size})", "prompt")
        out.append(list(q))
    return out


def prepare_completions(req: CompletionRequest, tokenizer, limits: Limits) -> list[Prepared]:
    """A text completion request → one Prepared per prompt (its grammar, when one is asked, on each)."""
    check_common(req, limits)
    if req.echo and req.stream and req.logprobs is not None:
        raise bad_request(
            "echo with logprobs is not streamed (the prompt's logprobs come with the whole answer): send stream: false",
            "echo",
        )
    grammar, _ = request_grammar(req)
    prompts = completion_prompts(req, tokenizer, limits)
    preps = [prepare(req, ids, limits, None, req.max_tokens) for ids in prompts]
    for p, ids in zip(preps, prompts):
        if grammar is not None and req.grounded is not False:  # x-grounded values: copied from the prompt
            text = tokenizer.decode(ids)
            with_grammar(p, grammar.with_sources({"user": text, "conversation": text}))
        else:
            with_grammar(p, grammar)
    return preps


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """One request per choice; with a seed, choice i samples with seed + i (so they differ)."""
    return [params if i == 0 or params.seed is None else replace(params, seed=params.seed + i) for i in range(n)]


def logprobs_wanted(req: Sampling) -> int | None:
    """Alternatives per token the client asks for (``None``: no logprobs)."""
    if isinstance(req, ChatRequest):
        if req.top_logprobs is not None and not req.logprobs:
            raise bad_request("top_logprobs needs logprobs set to true", "top_logprobs")
        return (req.top_logprobs or 0) if req.logprobs else None
    return getattr(req, "logprobs", None)


def prepare(
    req: Sampling,
    prompt_ids: list[int],
    limits: Limits,
    stop_token_ids: list[int] | None = None,
    max_tokens: int | None = None,
) -> Prepared:
    """Length checks and SamplingParams; every problem is an APIError (400 / 413)."""
    n = len(prompt_ids)
    if n == 0:
        raise bad_request("the prompt is empty", "prompt")
    if n > limits.max_prompt_tokens:
        raise too_large(
            f"the prompt is {n} tokens; this server accepts at most {limits.max_prompt_tokens}",
            code="prompt_too_long",
            param="messages" if isinstance(req, ChatRequest) else "prompt",
        )
    room = limits.context - n
    if room <= 0:
        raise too_large(f"the prompt is {n} tokens; the model's context is {limits.context}", code="prompt_too_long")
    if max_tokens is not None and max_tokens > room:
        name = "max_completion_tokens" if getattr(req, "max_completion_tokens", None) else "max_tokens"
        raise bad_request(
            f"prompt ({n} tokens) + {name} ({max_tokens}) exceeds the model's context of {limits.context}",
            name,
            "context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = min(limits.default_max_tokens, room)
    knobs = {
        **decoding_values(req),
        "logprobs": logprobs_wanted(req),
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "logit_bias": _logit_bias(req.logit_bias, limits.vocab_size),
        "repetition_penalty": req.repetition_penalty,
        "min_p": req.min_p,
        "min_tokens": req.min_tokens,
        "ignore_eos": req.ignore_eos,
    }
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if req.stop_token_ids and limits.vocab_size and not all(0 <= t < limits.vocab_size for t in req.stop_token_ids):
        raise bad_request(
            f"stop_token_ids must be token ids of this model (0..{limits.vocab_size - 1})", "stop_token_ids"
        )
    # ignore_eos: the chat's end-of-turn ids do not stop either; the client's own stop_token_ids do
    stops = [*([] if req.ignore_eos else stop_token_ids or []), *(req.stop_token_ids or [])]
    try:
        params = SamplingParams(
            max_tokens=max_tokens,
            stop=stop,
            stop_token_ids=stops or None,
            **{k: v for k, v in knobs.items() if v is not None},
        )
    except ValueError as e:
        raise bad_request(str(e), getattr(e, "param", None)) from None
    if getattr(req, "echo", False) and params.logprobs is not None:  # the prompt's own logprobs too
        params = replace(params, prompt_logprobs=params.logprobs)
    return Prepared(list(prompt_ids), params, block_size=req.block_size or limits.block_size)


def _logit_bias(bias: dict[str, float] | None, vocab_size: int) -> dict[int, float] | None:
    if not bias:
        return None
    out = {}
    for k, v in bias.items():
        if not str(k).isdigit() or (vocab_size and int(k) >= vocab_size):
            raise bad_request(
                f"logit_bias key {k!r} is not a token id of this model (0..{vocab_size - 1})", "logit_bias"
            )
        if not -100 <= v <= 100:
            raise bad_request(f"logit_bias[{k}] = {v} is outside [-100, 100]", "logit_bias")
        out[int(k)] = float(v)
    return out


def with_grammar(prep: Prepared, grammar: Grammar | None) -> None:
    """The request's grammar into its sampling parameters (checked with the rest of them)."""
    if grammar is None:
        return
    try:
        prep.params = replace(prep.params, grammar=grammar)
    except ValueError as e:
        raise bad_request(str(e), getattr(e, "param", None)) from None
