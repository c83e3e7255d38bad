"""A tiny random model behind a real uvicorn server on loopback; clients are the official ``openai`` ones."""

from __future__ import annotations

import contextlib

import pytest
import torch

from clover.engine import Engine
from clover.model import CloverForBlockDiffusion, preset
from clover.server import create_app
from clover.server.live import LiveServer

API_KEY = "test-key"


@pytest.fixture(scope="session")
def tokenizer():
    from clover.airspace.tokenizer import build_default_tokenizer

    return build_default_tokenizer(vocab_size=1024, n_texts=300)


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    torch.manual_seed(0)
    cfg = preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=2048,
        block_size=8,
        max_block_size=64,
    )
    return CloverForBlockDiffusion(cfg).eval()


@pytest.fixture(scope="session")
def live(tokenizer, tiny_model):
    """``live(engine=None, **create_app kwargs)`` → a running server (context manager)."""

    @contextlib.contextmanager
    def start(engine: Engine | None = None, **kw):
        engine = engine or Engine(tiny_model, tokenizer, max_batch_size=kw.pop("max_batch_size", 16))
        with LiveServer(create_app(engine, **kw)) as srv:
            yield srv

    return start


@pytest.fixture(scope="module")
def server(live):
    """One shared server with an API key (most protocol tests use it)."""
    with live(api_key=API_KEY, max_queue=64, default_max_tokens=24) as srv:
        yield srv


@pytest.fixture()
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


class ForcedEngine(Engine):
    """Test-only: while ``force(text)`` is set, every request generates exactly ``text`` then EOS
    (each position a one-token constrained slot), so tool-call parsing is deterministic end to
    end. ``prompts`` records what the server sent to the engine."""

    forced: list[int] | None = None

    def force(self, text: str | None, eos: bool = True) -> None:
        tok = self.tokenizer
        self.forced = None if text is None else tok.encode(text) + ([tok.eos_token_id] if eos else [])

    def add_request(self, prompt_ids, params=None, request_id=None):
        self.prompts = getattr(self, "prompts", []) + [list(prompt_ids)]
        self.allowed = getattr(self, "allowed", []) + [dict(params.allowed or {})]  # as the server asked
        self.grammars = getattr(self, "grammars", []) + [params.grammar]
        if self.forced is not None:
            params.allowed = {i: [t] for i, t in enumerate(self.forced)}
            params.grammar = None
            params.max_tokens = max(params.max_tokens, len(self.forced))
        return super().add_request(prompt_ids, params, request_id)
