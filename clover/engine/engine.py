"""The engine (docs/engine-api.md): requests in, events out, one scheduler iteration per ``step``.

The chain: ``Request`` (state of one request) → ``Batch`` (active blocks and cache rows of
the requests sharing a block size) → ``Scheduler`` (who runs) → ``Runner`` (model calls) →
``sampler`` + ``policies`` (what to commit) → ``Engine`` (this file: ties them together).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import torch

from clover.engine import PREFILL_CHUNK
from clover.engine.batch import Batch
from clover.engine.grammar import TokenGrammar, TokenTable, closing
from clover.engine.graphs import DecodeGraphs
from clover.engine.native_loop import denoise_blocks, runs_blocks
from clover.engine.outputs import Event, Finished, RequestOutput, StepEvent
from clover.engine.params import ParamError, SamplingParams
from clover.engine.policies import PassView
from clover.engine.prefix_cache import PrefixCache
from clover.engine.request import Request
from clover.engine.runner import Runner
from clover.engine.sampler import adjust_logits, choose_selected, logit_bias_vector
from clover.engine.scheduler import Scheduler
from clover.engine.span_choice import choose_end
from clover.engine.stages import (
    APPLY,
    FINISH,
    FORWARD,
    GRAMMAR_COMMIT,
    GRAMMAR_SLOT,
    PENALTIES,
    POLICY,
    SAMPLER,
    SCHEDULE,
    StageClock,
)
from clover.engine.text import tokenizer_eos_ids
from clover.model import CloverForBlockDiffusion


class Engine:
    def __init__(
        self,
        model: CloverForBlockDiffusion,
        tokenizer=None,
        max_batch_size: int = 16,
        fuse: bool = True,
        prefix_cache_mb: float = 0,
        prefill_chunk: int | None = PREFILL_CHUNK,
        cuda_graphs: bool = False,
    ):
        """``prefix_cache_mb``: keep prompts' committed blocks, up to this many megabytes of
        cache, for later prompts that start with them (``clover.engine.prefix_cache``; 0: off).
        ``prefill_chunk``: prompt tokens prefilled per step, so a long prompt is prefilled over
        several steps while running requests go on decoding (``clover.engine.scheduler``; 0 or
        None: each prompt whole, in the step it is admitted). ``cuda_graphs``: decoding passes
        replayed as captured CUDA graphs (``clover.engine.graphs``; a model on a CUDA device only)."""
        self.model = model.eval()
        self.config = model.config
        self.tokenizer = tokenizer
        self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20)) if prefix_cache_mb else None
        graphs = DecodeGraphs(model, max_batch_size) if cuda_graphs else None
        self.runner = Runner(model, fuse=fuse, prefix_cache=self.prefix_cache, graphs=graphs)
        self.scheduler = Scheduler(max_batch_size, self.config.mask_token_id, self.runner.device, prefill_chunk)
        self._events: list[Event] = []  # made outside step() (abort, max_tokens=0); the next step returns them
        self._scoring: list[Request] = []  # max_tokens=0 with prompt_logprobs: scored (only) by the next step
        self._live: set[str] = set()
        self._lock = threading.RLock()  # add_request / abort may come from another thread than step
        self.totals = {"requests": 0, "tokens": 0, "forward_passes": 0, "busy_s": 0.0}
        self._token_table = None  # the tokenizer's token bytes, built for the first grammar request
        self.clock: StageClock | None = None  # set one to see where a step's time goes (clover.engine.stages)

    # -- the API -----------------------------------------------------------------------------
    def add_request(
        self, prompt_ids: list[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        params = params or SamplingParams()
        req = self._make_request(list(prompt_ids), params, request_id)
        with self._lock:
            if req.id in self._live:
                raise ValueError(f"request id {req.id!r} is already in use")
            self._live.add(req.id)
            if params.max_tokens == 0 and params.prompt_logprobs is not None:
                self._scoring.append(req)
            elif params.max_tokens == 0:
                self._events.append(self._retire(req.finish("length")))
            else:
                self.scheduler.add(req)
        return req.id

    @torch.inference_mode()
    def step(self) -> list[Event]:
        """One scheduler iteration: every running request gets one denoise pass."""
        with self._lock:
            t0 = time.perf_counter()
            if clk := self.clock:
                clk.start()
            events, self._events = self._events, []
            for req in self._scoring:  # nothing to generate: the prompt's log-probabilities only
                self.runner.score(req)
                events.append(req.finish("length"))
            self._scoring = []
            self.scheduler.admit(self.runner)  # prompts prefilled (a chunk of a long one); done ones join
            clk and clk.lap(SCHEDULE)
            for batch in self.scheduler.running():
                if runs_blocks(self.model, batch):  # the back end decodes the blocks whole (clover.engine.native_loop)
                    events += denoise_blocks(self.runner, batch)
                    clk and clk.lap(FORWARD)
                else:
                    logits = self.runner.forward(batch)  # commit finished blocks (fused) + denoise active ones
                    clk and clk.lap(FORWARD)
                    events += self._denoise(batch, logits)  # each request's policy commits some positions
                events += self._finish_blocks(batch)  # final blocks: EOS, stop strings, text deltas
                clk and clk.lap(FINISH)
            self.scheduler.release_finished()  # finished requests free their cache rows now
            clk and clk.lap(SCHEDULE)
            self._account(events, t0)
            return events

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now and free its caches; the next ``step`` reports it ``Finished``."""
        with self._lock:
            req = self.scheduler.remove(request_id)
            if req is None and (req := next((r for r in self._scoring if r.id == request_id), None)):
                self._scoring.remove(req)
            if req is None:
                return None
            self._events.append(self._retire(req.finish("abort")))
            return req.output

    def has_unfinished(self) -> bool:
        """Requests waiting or running, or events not yet returned by ``step``."""
        return bool(self._events or self._scoring) or self.num_active > 0 or self.num_waiting > 0

    @property
    def num_active(self) -> int:
        return self.scheduler.num_active

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    def generate(self, prompt_ids: list[int], params: SamplingParams | None = None) -> RequestOutput:
        """Blocking, one request (other requests in the engine progress too; their events are dropped)."""
        return self.generate_batch([prompt_ids], params)[0]

    def generate_batch(self, prompts: list[list[int]], params=None) -> list[RequestOutput]:
        """Blocking: all prompts decoded together (continuous batching); outputs in prompt order."""
        plist = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(plist)} sampling params for {len(prompts)} prompts")
        ids: list[str] = []
        try:
            for p, sp in zip(prompts, plist):
                ids.append(self.add_request(p, sp))
        except Exception:  # a bad prompt or setting: the ones already added must not linger
            for rid in ids:
                self.abort(rid)
            raise
        outs: dict[str, RequestOutput] = {}
        while len(outs) < len(ids):
            for ev in self.step():
                if isinstance(ev, Finished) and ev.request_id in ids:
                    outs[ev.request_id] = ev.output
        return [outs[i] for i in ids]

    def stream(self, prompt_ids: list[int], params: SamplingParams | None = None) -> Iterator[Event]:
        """Events of one request as they happen; closing the iterator early aborts the request."""
        rid = self.add_request(prompt_ids, params)
        done = False
        try:
            while not done:
                for ev in self.step():
                    if ev.request_id == rid:
                        done = done or isinstance(ev, Finished)
                        yield ev
        finally:
            if not done:
                self.abort(rid)

    async def astream(self, prompt_ids: list[int], params: SamplingParams | None = None) -> AsyncIterator[Event]:
        """``stream`` for asyncio: each step runs in a worker thread, never on the event loop."""
        it = self.stream(prompt_ids, params)
        sentinel = object()
        try:
            while (ev := await asyncio.to_thread(next, it, sentinel)) is not sentinel:
                yield ev
        finally:
            await asyncio.to_thread(it.close)

    def stats(self) -> dict:
        """Figures of the run so far (finished requests)."""
        t = dict(self.totals, forward_calls=self.runner.forwards)
        if self.prefix_cache is not None:
            t.update(self.prefix_cache.stats())
        if self.runner.graphs is not None:
            t.update(self.runner.graphs.stats())
        t["tpf"] = t["tokens"] / t["forward_passes"] if t["forward_passes"] else 0.0
        t["tokens_per_s"] = t["tokens"] / t["busy_s"] if t["busy_s"] else 0.0
        return t

    # -- a pass ------------------------------------------------------------------------------
    def _denoise(self, batch: Batch, logits: torch.Tensor) -> list[Event]:
        """Choose tokens, let each request's policy pick what to commit (or edit), apply it."""
        cand = batch.masked & batch.need  # masked positions still worth a token
        settled = ~batch.masked & batch.need & batch.editing[:, None]  # committed, may be edited
        for r, req in enumerate(batch.requests):  # penalties and logit_bias (only rows that ask)
            if req.counts is not None:
                done = ~batch.masked[r] & batch.wanted[r]  # generated positions committed in this block
                now = req.counts + torch.bincount(batch.x[r][done], minlength=len(req.counts))
                adjust_logits(logits[r], req.params, now, req.bias, req.in_prompt)
            if req.grammar is None and (req.banned or req.params.min_tokens):  # a grammar decides where it ends
                self._ban_stops(logits[r], req, batch.allowed[r])
        clk = self.clock
        clk and clk.lap(PENALTIES)
        constrained = [(r, req) for r, req in enumerate(batch.requests) if req.grammar is not None]
        allowed = list(batch.allowed)  # + this pass's grammar slot: the leftmost open position of a constrained row
        for r, req in constrained:
            open_ = cand[r].nonzero()
            if len(open_):
                self._choose_span(batch, r, req, int(open_[0]))
                ids = req.grammar.allowed(req.gstate) or req.grammar.eos
                near = closing.restrict(req.grammar, req.gstate, closing.tokens_left(req, int(open_[0])), ids)
                ok = set(ids)  # closing only narrows what the grammar allows (or the slot could take nothing)
                ids = [i for i in near if i in ok] or ids
                ids = torch.tensor(ids, device=logits.device)
                allowed[r] = {**allowed[r], int(open_[0]): ids}
        clk and clk.lap(GRAMMAR_SLOT)
        ch = choose_selected(logits, cand | settled, batch.x, batch.requests, allowed, batch.mask_id, batch.top)
        clk and clk.lap(SAMPLER)
        view = PassView(
            ch.tok,
            ch.conf,
            ch.cur_p,
            batch.x,
            cand,
            settled,
            batch.threshold,
            steps_left=(batch.steps - batch.step).clamp(min=1),
            edits_left=batch.max_edits - batch.edits,
            stop_ids=batch.stop_ids,
        )
        commit, edit, sure = torch.zeros_like(cand), torch.zeros_like(cand), torch.zeros_like(cand)
        grows = torch.zeros_like(cand)  # rows whose policy extends a run where a position is sure
        for policy, rows in batch.policies:
            commit |= rows & policy.commit(view)
            if (e := policy.edit(view)) is not None:
                edit |= rows & e
            if constrained:
                sure |= rows & policy.extends(view)
                grows |= rows & policy.extends(replace(view, conf=torch.ones_like(view.conf)))
        clk and clk.lap(POLICY)
        for r, req in constrained:
            commit[r] = self._grammar_commit(req, cand[r], ch.tok[r], sure[r], bool(grows[r].any()))
            edit[r] = False
        clk and clk.lap(GRAMMAR_COMMIT)
        events = self._step_events(batch, batch.apply(ch, commit, edit))
        clk and clk.lap(APPLY)
        return events

    def _choose_span(self, batch: Batch, r: int, req: Request, slot: int) -> None:
        """A grammar whose grounded strings end by a whole-span choice (``with_sources(...,
        ends="span")``): where the slot is a copy's end decision, choose it now
        (``clover.engine.span_choice``), with every token before the slot as context."""
        if getattr(req.grammar.g, "ends", "token") != "span" or req.grammar.g.span_ends(req.gstate) is None:
            return
        before = (req.prompt + req.text.tokens)[: req.block_start] + batch.x[r, :slot].tolist()
        req.gstate = choose_end(self.model, req.grammar, req.gstate, before, req.block_size)

    @staticmethod
    def _ban_stops(logits: torch.Tensor, req: Request, slots: dict) -> None:
        """``ignore_eos``: the model's EOS ids at every position; ``min_tokens``: every stop id at
        positions before that many generated tokens. Constrained slots keep their allowed sets."""
        bans = []
        if req.banned:
            bans.append((len(logits), req.banned))
        upto = req.params.min_tokens - (req.n_generated - req.gen_lo)  # block positions before min_tokens
        if upto > 0 and req.stop_ids:
            bans.append((min(upto, len(logits)), req.stop_ids))
        for upto, ids in bans:
            rows = [i for i in range(upto) if i not in slots]
            if rows:
                logits[torch.tensor(rows)[:, None], torch.tensor(ids)[None, :]] = -float("inf")

    @staticmethod
    def _grammar_commit(
        req: Request, cand: torch.Tensor, tok: torch.Tensor, sure: torch.Tensor, forced: bool = False
    ) -> torch.Tensor:
        """A constrained request commits left to right: the leftmost open position (its token is
        allowed by construction), then each next one while its policy calls it sure
        (``Policy.extends``: p >= τ; never for ``ar``) and its token continues the grammar. So
        constrained output keeps the block's parallelism wherever the model is sure and grammatical.

        ``forced`` (rows whose policy extends runs): inside a copy from the source whose next bytes
        the grammar forces (every span still possible goes on the same way, none may end yet),
        the one token allowed there (``TokenGrammar.forced_token``) is committed whether or not
        the model is sure of it, so a copy goes on in the same pass, and commits what one position
        per pass would. After a token that was not the model's own first choice, only forced ones
        follow (its guesses further on assumed another token there).
        ``tok`` is updated in place with the tokens so chosen."""
        out = torch.zeros_like(cand)
        c, t, s = cand.tolist(), tok.tolist(), sure.tolist()
        if True not in c:
            return out
        state, g, first = req.gstate, req.grammar, c.index(True)
        spans = getattr(g.g, "ends", "token") == "span"  # a copy's end is decided at a slot (_choose_span)
        own = True  # every token of the run so far is the model's own choice (so its next guesses hold)
        for q in range(first, len(c)):
            if not c[q]:
                break
            if q > first and not (own and s[q] and g.step(state, t[q]) is not None):
                best = g.forced_token(state) if forced else None
                if best is None:
                    break
                own = own and best == t[q]
                t[q] = best
                tok[q] = best
            nxt = g.step(state, t[q])
            if nxt is not None and q > first and not closing.fits(g, nxt, closing.tokens_left(req, q) - 1):
                break  # an ending would no longer fit in max_tokens: the next pass's slot chooses (closing)
            if nxt is None:
                if q == first and t[q] in g.eos:  # a dead end (no token continues the text): it ends here
                    out[q] = True
                break
            out[q], state = True, nxt
            if t[q] in g.eos or spans and g.g.span_ends(state) is not None:
                break
        req.gstate = state
        return out

    def _step_events(self, batch: Batch, changed: torch.Tensor) -> list[Event]:
        """One ``StepEvent`` per request: the positions this pass set, absolute."""
        r_i = changed.nonzero()
        n = r_i.shape[0]
        flat = torch.cat([r_i.T.reshape(-1), batch.x[changed], batch.step - 1]).tolist()  # one sync
        per_row: list[tuple[list[int], list[int]]] = [([], []) for _ in batch.requests]
        for r, i, t in zip(flat[:n], flat[n : 2 * n], flat[2 * n : 3 * n]):
            per_row[r][0].append(batch.requests[r].block_start + i)
            per_row[r][1].append(t)
        events: list[Event] = []
        for req, (pos, toks), step in zip(batch.requests, per_row, flat[3 * n :]):
            req.passes += 1
            events.append(StepEvent(req.id, req.block_start, pos, toks, step))
        return events

    def _finish_blocks(self, batch: Batch) -> list[Event]:
        """Blocks with nothing left to fill are final: hand their tokens to their requests."""
        batch.refresh_need()
        done = (~(batch.masked & batch.need).any(1)).nonzero()[:, 0].tolist()
        if not done:
            return []
        events: list[Event] = []
        go_on = []
        for r, xs, nd in zip(done, batch.x[done].tolist(), batch.need[done].tolist()):
            req = batch.requests[r]
            k = req.params.logprobs
            events += req.finish_block(
                [t for t, n in zip(xs, nd) if n], None if k is None else batch.logprobs(r, nd, k)
            )
            if not req.finished:
                go_on.append(r)
        if go_on:
            batch.next_block(go_on)
        return events

    # -- requests ----------------------------------------------------------------------------
    def _make_request(self, prompt: list[int], params: SamplingParams, rid: str | None) -> Request:
        cfg = self.config
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        try:
            bs = cfg.check_block_size(cfg.block_size if params.block_size is None else params.block_size)
        except ValueError as e:
            raise ParamError(str(e), "block_size") from None
        V = cfg.vocab_size
        if not all(isinstance(t, int) and 0 <= t < V for t in prompt):
            raise ValueError(f"prompt token ids must be integers in [0, {V})")
        if not prompt and cfg.shift_logits:
            raise ValueError("the prompt is empty: this model (shift_logits) predicts each token from the one before")
        if len(prompt) + params.max_tokens > cfg.max_position_embeddings:
            raise ParamError(
                f"prompt of {len(prompt)} tokens + max_tokens {params.max_tokens} exceeds the model's "
                f"max_position_embeddings {cfg.max_position_embeddings}",
                "max_tokens",
            )
        for i, ids in (params.allowed or {}).items():
            if max(ids) >= V:
                raise ParamError(f"allowed[{i}] has token id {max(ids)} outside the vocabulary of {V}", "allowed")
        if params.logit_bias and max(params.logit_bias) >= V:
            raise ParamError(
                f"logit_bias has token id {max(params.logit_bias)} outside the vocabulary of {V}", "logit_bias"
            )
        if params.stop and self.tokenizer is None:
            raise ParamError("stop strings need an engine with a tokenizer", "stop")
        eos = set(cfg.eos_ids) | set(tokenizer_eos_ids(self.tokenizer))
        stop_ids = (set() if params.ignore_eos else eos) | set(params.stop_token_ids or [])
        rid = uuid.uuid4().hex if rid is None else str(rid)
        req = Request(rid, prompt, params, bs, stop_ids, self.tokenizer, self.runner.device)
        if params.ignore_eos:
            req.banned = sorted(eos - stop_ids)
        if params.grammar is not None:
            if self.tokenizer is None:
                raise ParamError("a grammar needs an engine with a tokenizer", "grammar")

            if self._token_table is None:
                self._token_table = TokenTable(self.tokenizer)
            req.grammar = TokenGrammar(params.grammar, self._token_table, sorted(stop_ids))
            req.gstate = req.grammar.start
            if (why := closing.check(req.grammar, params.max_tokens)) is not None:
                raise ParamError(why, "max_tokens")  # no complete text fits (clover.engine.grammar.closing)
        if params.adjusts_logits:
            req.counts = torch.zeros(V, dtype=torch.long, device=self.runner.device)
            if params.logit_bias:
                req.bias = logit_bias_vector(params.logit_bias, V, self.runner.device)
            if params.repetition_penalty != 1:
                req.in_prompt = torch.zeros(V, dtype=torch.bool, device=self.runner.device)
                req.in_prompt[torch.tensor(prompt, dtype=torch.long, device=self.runner.device)] = True
        return req

    def _account(self, events: list[Event], t0: float) -> None:
        for ev in events:
            if isinstance(ev, Finished):
                self._retire_output(ev.output)
        self.totals["busy_s"] += time.perf_counter() - t0

    def _retire(self, ev: Finished) -> Finished:
        self._retire_output(ev.output)
        return ev

    def _retire_output(self, out: RequestOutput) -> None:
        if out.request_id in self._live:
            self._live.discard(out.request_id)
            self.totals["requests"] += 1
            self.totals["tokens"] += out.stats["tokens"]
            self.totals["forward_passes"] += out.stats["forward_passes"]
