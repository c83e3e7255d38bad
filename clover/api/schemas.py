"""Request bodies (pydantic). Unknown fields are accepted and ignored, as OpenAI clients send many;
vLLM's sampling and structured-output extras and Clover's own (the decoding settings of
``clover.api.settings``: ``block_size``, ``policy``, ``threshold``, ``steps_per_block``, ``top_k``
...; ``stream_options.include_steps``) sit next to the OpenAI ones."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from clover.api.settings import BLOCK_SETTINGS, DECODING, Setting

_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"
_WORD = r"^[A-Za-z]{1,64}$"  # a word of reply_words: a run of ASCII letters
MAX_REPLY_WORDS = 65536


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    name: str
    arguments: str | dict = "{}"


class ToolCall(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]  # function: legacy tool result
    content: str | list[dict] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    function_call: FunctionCall | None = None  # legacy: an assistant's single call


class FunctionDef(_Open):
    name: str = Field(pattern=_NAME)
    description: str | None = None
    parameters: dict | None = None


class Tool(_Open):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Open):
    name: str = Field(pattern=_NAME)


class NamedToolChoice(_Open):
    type: Literal["function"] = "function"
    function: NamedFunction


def _settings_model(name: str, settings: tuple[Setting, ...]) -> type[_Open]:
    """A base model with one optional field per decoding setting (``clover.api.settings``)."""
    defs = {x.name: (x.type | None, Field(None, description=x.help, **x.bounds)) for x in settings}
    return create_model(name, __base__=_Open, **defs)


# Clover's decoding settings, as every request that decodes takes them
Decoding = _settings_model("Decoding", DECODING)
BlockDecoding = _settings_model("BlockDecoding", BLOCK_SETTINGS)  # joint decisions: how the block is decoded


class StreamOptions(_Open):  # booleans here and below take null as unset: OpenAI's spec allows it
    include_usage: bool | None = False
    include_steps: bool | None = False  # Clover: denoise-step events (what the playground draws)


class Sampling(Decoding):
    """The knobs shared by chat and text completions: the decoding settings, then these."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = Field(None, max_length=1024)  # token id (as a string) -> bias
    stop: str | list[str] | None = None  # at most MAX_STOP sequences (checked in prepare.check_common)
    n: int | None = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # vLLM's sampling extras
    repetition_penalty: float | None = Field(None, gt=0, le=10)
    min_p: float | None = Field(None, ge=0, le=1)
    min_tokens: int | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = Field(None, max_length=16)
    # structured output (clover.api.structured.request_grammar): OpenAI's response_format, or the
    # extras vLLM (guided_*, structured_outputs) and SGLang (regex, json_schema, ebnf) clients send
    response_format: dict | None = None  # text, json_object or json_schema
    guided_json: dict | bool | str | None = None
    guided_choice: list[Annotated[str, Field(max_length=2000)]] | None = Field(None, max_length=256)
    guided_regex: str | None = None
    guided_grammar: str | None = None
    structured_outputs: dict | None = None
    regex: str | None = None
    json_schema: dict | bool | str | None = None
    ebnf: str | None = None
    # Clover's: false decodes x-grounded properties as plain ones (docs/grounding.md)
    grounded: bool | None = None
    # Clover's: true holds a reply's numbers and ids to those of the user turns and tool results
    # (docs/grounding.md, Grounded replies)
    grounded_reply: bool | None = None
    # Clover's, with grounded_reply: the words a reply may write besides the conversation's (a list
    # of words), the model's task's reply vocabulary (true, or absent where the task ships one), or
    # any word (false) (docs/grounding.md, Grounded replies)
    reply_words: (
        bool | Annotated[list[Annotated[str, Field(pattern=_WORD)]], Field(max_length=MAX_REPLY_WORDS)] | None
    ) = None


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    parallel_tool_calls: bool | None = None  # false: at most one tool call per turn
    # vLLM's: the last (assistant) message is continued instead of a new turn started (a prefill)
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None  # default: true unless continue_final_message
    # OpenAI's deprecated function calling, as older clients send it: mapped onto tools (one call
    # per turn) and answered in its own shape (message.function_call, finish_reason "function_call")
    functions: list[FunctionDef] | None = None
    function_call: Literal["auto", "none"] | NamedFunction | None = None

    @model_validator(mode="after")
    def _legacy_functions(self) -> ChatRequest:
        if self.functions is None and self.function_call is None:
            return self
        if self.tools is not None:
            raise ValueError("functions and tools cannot be combined (functions is the deprecated form of tools)")
        self.tools = [Tool(function=f) for f in self.functions or []]
        fc = self.function_call
        self.tool_choice = NamedToolChoice(function=fc) if isinstance(fc, NamedFunction) else fc
        self.parallel_tool_calls = False
        return self

    @property
    def legacy_functions(self) -> bool:
        return self.functions is not None


class CompletionRequest(Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]  # one prompt, or a batch (one choice each)
    max_tokens: int | None = Field(None, ge=0)  # 0 with echo: score the prompt only (legacy completions)
    echo: bool | None = False  # the prompt comes back before the completion (with its logprobs when asked)
    logprobs: int | None = Field(None, ge=0, le=5)
    suffix: str | None = None
    best_of: int | None = None  # accepted where it changes nothing (= n); else refused


class TokenizeRequest(_Open):
    """``POST /tokenize`` (vLLM's shape): a prompt, or a chat rendered as the chat endpoint renders it
    (``messages``, or ``prompt`` holding the messages, as lm-evaluation-harness' remote tokenizer
    sends a chat)."""

    model: str | None = None
    prompt: str | list[dict] | None = None
    messages: list[dict] | None = None
    tools: list[dict] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = True  # accepted: this tokenizer adds no special tokens of its own
    return_token_strs: bool | None = False


class DetokenizeRequest(_Open):
    model: str | None = None
    tokens: list[int]


class DecisionQuestion(_Open):
    question: str = Field(min_length=1, max_length=2000)
    # bounded like the question: every option is tokenised with the prompt, on the event loop
    options: list[Annotated[str, Field(max_length=2000)]] = Field(min_length=2, max_length=8)


class DecisionRequest(BlockDecoding):
    model: str | None = None
    context: str = Field(max_length=20000)
    questions: list[DecisionQuestion]  # 1..8, checked with a clear message in clover.api.joint_decisions
    mode: Literal["joint", "independent"] = "joint"
    stream: bool | None = None

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, v):
        if v:  # refused, not ignored: the client would wait for events that never come
            raise ValueError("/v1/decisions does not stream: it answers with one JSON object")
        return v

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_null_is_unset(cls, v):
        return "joint" if v is None else v  # null as unset, as for the other nullable fields
