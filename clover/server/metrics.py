"""Prometheus metrics of one server (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TPF_BUCKETS = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32, 64)
SHARE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

ENDPOINTS = {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/decisions",
    "/v1/models",
    "/health",
    "/metrics",
    "/",
    "/v1/agent/world",
    "/v1/agent/execute",
}
# paths with an id in them, by their prefix: one label each, not one per id
TEMPLATES = {"/v1/responses/": "/v1/responses/{id}", "/v1/models/": "/v1/models/{id}"}


class Metrics:
    def __init__(self, aengine=None):
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "clover_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "clover_request_latency_seconds",
            "HTTP request latency (streams: to the last byte)",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("clover_prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("clover_generation_tokens", "generated tokens", registry=r)
        self.forward_passes = Counter("clover_forward_passes", "denoise passes of finished requests", registry=r)
        self.finished = Counter(
            "clover_engine_requests",
            "engine requests finished, by reason (stop, length, "
            "aborted: the client went away or the request was cancelled)",
            ["reason"],
            registry=r,
        )
        self.tpf = Histogram(
            "clover_tokens_per_forward", "tokens per forward pass (TPF) per request", buckets=TPF_BUCKETS, registry=r
        )
        self.ttft = Histogram(
            "clover_time_to_first_token_seconds",
            "engine time to first final token",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_latency = Histogram(
            "clover_engine_request_seconds", "engine wall time per request", buckets=LATENCY_BUCKETS, registry=r
        )
        share = {
            "before": ("clover_server_before_engine_seconds", "arrival to submitted to the engine thread"),
            "wait": ("clover_engine_wait_seconds", "submitted to the start of its first engine step"),
            "after": ("clover_server_after_engine_seconds", "end of its last engine step to its last byte sent"),
        }
        self.share = {k: Histogram(n, d, buckets=SHARE_BUCKETS, registry=r) for k, (n, d) in share.items()}
        self.decisions = Counter("clover_decisions", "decision groups answered, by mode", ["mode"], registry=r)
        self.queue_depth = Gauge("clover_queue_depth", "requests waiting for a batch slot", registry=r)
        self.active = Gauge("clover_active_requests", "requests in the running batch", registry=r)
        self.outstanding = Gauge("clover_outstanding_requests", "requests accepted and not finished", registry=r)
        if aengine is not None:
            self.queue_depth.set_function(lambda: aengine.snapshot["waiting"])
            self.active.set_function(lambda: aengine.snapshot["active"])
            self.outstanding.set_function(lambda: aengine.outstanding)
            pc = getattr(aengine.engine, "prefix_cache", None)
            if pc is not None:  # vLLM's prefix_cache_queries / hits, as running totals
                for name, doc, get in [
                    ("clover_prefix_cache_lookups", "prefills that looked for a cached prefix", lambda: pc.lookups),
                    ("clover_prefix_cache_hits", "prefills that started from a cached prefix", lambda: pc.hits),
                    ("clover_prefix_cache_hit_tokens", "prompt tokens not recomputed", lambda: pc.hit_tokens),
                ]:
                    Gauge(name, doc, registry=r).set_function(get)

    def observe_http(self, path: str, status: int, seconds: float) -> None:
        endpoint = path if path in ENDPOINTS else "other"
        for prefix, label in TEMPLATES.items():
            if path.startswith(prefix):
                endpoint = label + "/input_items" if path.endswith("/input_items") else label
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_share(self, arrived: float, times: dict, last_byte: float) -> None:
        """The server's share of one answered request that ran on the engine (``times``:
        ``clover.server.async_engine.REQUEST_TIMES``; all perf_counter seconds)."""
        if not {"submitted", "first_step", "last_step"} <= times.keys():
            return
        self.share["before"].observe(times["submitted"] - arrived)
        self.share["wait"].observe(times["first_step"] - times["submitted"])
        self.share["after"].observe(last_byte - times["last_step"])

    def observe_output(self, out) -> None:
        """A finished engine request (called in the engine thread; prometheus_client is thread-safe)."""
        s = out.stats
        if out.finish_reason == "abort":  # counted, and its tokens; its timings would skew the histograms
            self.finished.labels("aborted").inc()
            self.prompt_tokens.inc(len(out.prompt_ids))
            self.generation_tokens.inc(s.get("tokens", len(out.token_ids)))
            return
        self.finished.labels(out.finish_reason).inc()
        self.prompt_tokens.inc(len(out.prompt_ids))
        self.generation_tokens.inc(s.get("tokens", len(out.token_ids)))
        self.forward_passes.inc(s.get("forward_passes", 0))
        if s.get("forward_passes"):
            self.tpf.observe(s.get("tpf", 0.0))
        if s.get("tokens"):
            self.ttft.observe(s.get("ttft_s", 0.0))
        self.engine_latency.observe(s.get("wall_s", 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
