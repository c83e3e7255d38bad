"""``clover serve``: the OpenAI-compatible server on uvicorn (loopback by default)."""

from __future__ import annotations

import argparse
import os
import sys

from clover.api.loading import (
    PREFIX_CACHE_MB,  # light: torch and the model load on first use
    load_engine,
)
from clover.api.store import MAX_ENTRIES, MAX_MB, TTL_S
from clover.commands.common import (
    COMPILE_NOTE,
    add_backend_arg,
    add_device_args,
    add_graphs_arg,
    add_model_positional,
    add_threads_arg,
    check_graphs,
    device_setup,
    int_at_least,
    positive_int,
    take_model_positional,
)
from clover.commands.threads import apply_threads
from clover.engine import PREFILL_CHUNK
from clover.server.listen import listen


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # deferred: uvicorn, not for clover --help

    from clover.server.app import create_app  # deferred: fastapi and torch, not for clover --help

    take_model_positional(args)
    check_graphs(args, device_setup(args, "clover serve")[0], "clover serve")
    sock, problem = listen(args.host, args.port)
    if problem:  # before the model loads, and instead of uvicorn's log lines after a "listening" banner
        print(f"clover serve: {problem}", file=sys.stderr)
        return 2
    env_key = os.environ.get("CLOVER_API_KEY")
    args.api_key = args.api_key or ([env_key] if env_key else None)
    try:
        engine = load_engine(
            args.model,
            args.max_batch_size,
            args.threads,
            args.prefix_cache_mb,
            args.device,
            args.dtype,
            args.compile,
            args.backend,
            prefill_chunk=args.prefill_chunk,
            cuda_graphs=args.cuda_graphs,
        )
        apply_threads(engine.model, args.threads)  # before the engine's thread starts, which takes the count
        app = create_app(
            engine,
            model_name=args.served_model_name,
            api_key=args.api_key,
            max_queue=args.max_queue,
            max_prompt_tokens=args.max_prompt_tokens,
            default_max_tokens=args.default_max_tokens,
            responses_db=args.responses_db,
            responses_max=args.responses_max,
            responses_max_mb=args.responses_max_mb,
            responses_ttl_s=args.responses_ttl,
        )
    except (FileNotFoundError, ValueError) as e:
        sock.close()
        print(f"clover serve: {e}", file=sys.stderr)
        if args.model is None:
            print("Pass --model DIR (a Clover checkpoint: config.json, safetensors, tokenizer.json).", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print(f"clover serve: warning: listening on {args.host} without --api-key", file=sys.stderr)
    # the socket bound above is the one served (no gap in which another process could take the
    # port); with --port 0 the banner names the port the system chose
    port = sock.getsockname()[1]
    print(f"clover serve: http://{args.host}:{port}  (playground at /, OpenAI API at /v1)", file=sys.stderr, flush=True)
    if args.compile:
        print(COMPILE_NOTE.replace("clover:", "clover serve:"), file=sys.stderr)
    config = uvicorn.Config(app, host=args.host, port=port, log_level=args.log_level, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (0-65535)")
    return port


def register(sub) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with tool calls, decisions and a playground")
    add_model_positional(p)
    p.add_argument("--model", help="Clover checkpoint directory, or a GGUF file (default: the bundled model)")
    add_backend_arg(p)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    p.add_argument("--port", type=_port, default=8000, help="port to listen on")
    p.add_argument(
        "--api-key",
        action="append",
        help="require 'Authorization: Bearer KEY' on /v1/*; repeat for several keys (a stored response is "
        "visible to the key that created it only); default: $CLOVER_API_KEY, else none",
    )
    p.add_argument("--max-queue", type=int, default=64, help="requests waiting beyond the running batch; then 429")
    p.add_argument("--max-batch-size", type=int, default=16, help="requests decoded together")
    p.add_argument("--max-prompt-tokens", type=int, help="longer prompts get 413 (default: the model's context)")
    p.add_argument("--default-max-tokens", type=int, default=256, help="max_tokens when a request gives none")
    p.add_argument("--served-model-name", default="clover", help="the model id clients must send")
    add_threads_arg(p)
    add_device_args(p)
    add_graphs_arg(p)
    p.add_argument(
        "--prefix-cache-mb",
        type=int_at_least(0),
        default=PREFIX_CACHE_MB,
        help="keep prompts' committed blocks, up to this many megabytes of cache, for prompts that start "
        "with them (an agent's next turn, a shared system prompt); 0: off",
    )
    p.add_argument(
        "--prefill-chunk",
        type=int_at_least(0),
        default=PREFILL_CHUNK,
        metavar="TOKENS",
        help="prompt tokens prefilled per engine step: a long prompt is prefilled over several steps while the "
        "running requests go on decoding, instead of stalling them; 0: each prompt whole",
    )
    p.add_argument(
        "--responses-db",
        metavar="PATH",
        help="keep stored Responses (store=true, the default) in this SQLite file, so they survive a restart "
        "(default: in memory)",
    )
    p.add_argument(
        "--responses-max",
        type=positive_int,
        default=MAX_ENTRIES,
        help="stored Responses kept at most; past it the least recently used goes",
    )
    p.add_argument(
        "--responses-max-mb", type=float, default=MAX_MB, help="megabytes of stored Responses (their JSON) kept at most"
    )
    p.add_argument(
        "--responses-ttl",
        type=float,
        default=TTL_S,
        metavar="SECONDS",
        help="a stored response is dropped this long after it was created (default: 7 days)",
    )
    p.add_argument("--log-level", default="info", help="uvicorn's log level")
    p.set_defaults(func=cmd_serve)
