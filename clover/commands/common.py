"""What the command modules share: argument types and groups, the model given as a positional,
decoding settings from flags, ``--device`` / ``--dtype``, and loading a checkpoint with a
one-line message on failure.

Imports stay light (torch and the model load inside the functions): ``clover --help`` builds
every command's parser.
"""

from __future__ import annotations

import argparse
import copy
import sys

from clover.api.loading import load_model_dir
from clover.api.settings import add_decoding_flags, decoding_values
from clover.backends import BACKENDS
from clover.bench.results import Recorder
from clover.commands.threads import apply_threads
from clover.data.task import ALIASES, deprecated, get_task, model_task, task_names
from clover.ops.device import DEVICES, DTYPES, resolve_device, resolve_dtype


class HelpFormatter(argparse.HelpFormatter):
    """Every flag's help ends with its default (``--port 8000``, the threshold), unless its text
    already says what the default is or there is none to show (unset, an on/off switch)."""

    def _format_action(self, action):
        d = action.default
        shown = d is not None and d is not argparse.SUPPRESS and not isinstance(d, bool)
        if (
            action.option_strings
            and shown
            and action.help is not argparse.SUPPRESS
            and "default" not in (action.help or "")
        ):
            action = copy.copy(action)
            action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """The parser of ``clover`` and of each command: help texts with their defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


COMPILE_NOTE = (
    "clover: --compile: the first passes compile (a minute or more on a CPU; "
    "torch's disk cache makes the next start faster)"
)


def load_model_and_tokenizer(
    model_dir: str | None,
    threads: int | None = None,
    device="auto",
    dtype="auto",
    compile: bool = False,
    backend: str = "auto",
):
    """A checkpoint directory (default: the bundled model) or a GGUF file → (model, tokenizer or
    None), on ``device`` in ``dtype``, passes compiled or not (``--device``, ``--dtype``,
    ``--compile``), on ``backend`` (``--backend``), on ``threads`` CPU threads or the default
    (``clover.commands.threads``); a problem is a one-line ``clover: ...`` exit."""
    if compile:
        print(COMPILE_NOTE, file=sys.stderr)
    try:
        model, tokenizer = load_model_dir(model_dir, threads, device, dtype, compile, backend)
    except (FileNotFoundError, ValueError) as e:
        print(f"clover: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    apply_threads(model, threads)  # --threads, else CLOVER_THREADS, else the rule of clover.commands.threads
    return model, tokenizer


def add_device_args(p: argparse.ArgumentParser, default: str = "auto", compile: bool = True) -> None:
    """``--device``, ``--dtype`` and ``--compile``: where the model runs, in what precision, how."""
    p.add_argument(
        "--device",
        choices=DEVICES,
        default=default,
        help="where the model runs (auto: cuda when torch sees a GPU, else cpu; a quantized checkpoint stays on cpu)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="auto",
        help="weights' precision (auto: bfloat16 on cuda, the checkpoint's own on cpu; a quantized "
        "checkpoint's integer weights stay as stored)",
    )
    if not compile:
        return
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="decoding passes through torch.compile: faster passes once compiled, after a compile of a minute or "
        "more at the first requests (cached on disk for the next start); docs/benchmarks.md, 'Compiled passes'",
    )


def add_graphs_arg(p: argparse.ArgumentParser) -> None:
    """``--cuda-graphs``: the engine's decoding passes as captured CUDA graphs."""
    p.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="decoding passes replayed as captured CUDA graphs, one per batch bucket and block size (a model on a "
        "CUDA GPU only; off by default until measured on one); docs/architecture.md, 'CUDA graphs'",
    )


def check_graphs(args: argparse.Namespace, device, command: str = "clover") -> None:
    """``--cuda-graphs`` on a device other than CUDA: a one-line exit naming the flag, before anything loads."""
    if getattr(args, "cuda_graphs", False) and device.type != "cuda":
        print(
            f"{command}: --cuda-graphs: CUDA graphs need --device cuda (the model runs on {device.type})",
            file=sys.stderr,
        )
        raise SystemExit(2)


def device_setup(args: argparse.Namespace, command: str = "clover"):
    """``--device`` / ``--dtype`` checked before anything loads → (torch.device, torch.dtype or None
    for the checkpoint's own), for a model the command builds itself; a checkpoint loads with the
    flags as given (``auto`` keeps a quantized one on the CPU). A GPU asked for and not there is a
    one-line exit naming the flag."""
    try:
        device = resolve_device(args.device)
    except ValueError as e:
        print(f"{command}: --device {args.device}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return device, resolve_dtype(args.dtype, device)


def recorder(args: argparse.Namespace) -> Recorder:
    """The command's result file in the making (``clover.bench.results.Recorder``): the one the
    command line made as the command started, or, for a command run from a parser of its own, one
    made now that names this process's command line."""
    if getattr(args, "recorder", None) is None:
        args.recorder = Recorder()
    return args.recorder


def int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum`` (``--threads``, counts)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a positive integer, got {v}" if minimum == 1 else f"must be >= {minimum}, got {v}"
            )
        return v

    return parse


positive_int = int_at_least(1)


def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun that agrees with it: ``count(1, "pass", "passes")`` is "1 pass"."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def add_model_positional(p: argparse.ArgumentParser) -> None:
    """``clover serve DIR`` / ``clover chat DIR``: the model as a positional too (``vllm serve``'s form)."""
    p.add_argument("model_dir", nargs="?", metavar="MODEL", help="same as --model")


def take_model_positional(args: argparse.Namespace) -> None:
    """Fold the positional MODEL into ``args.model``; both given and different is an error."""
    given = getattr(args, "model_dir", None)
    if given is not None and args.model is not None and given != args.model:
        raise SystemExit(f"clover: two models given ({given!r} and --model {args.model!r}); pass one")
    args.model = args.model or given


THREADS_HELP = (
    "CPU threads (default: one for a model under 20 M active parameters, else the physical cores other "
    "programs leave idle; CLOVER_THREADS=N sets it too; docs/benchmarks.md, 'CPU threads')"
)


def add_threads_arg(p: argparse.ArgumentParser, help: str = THREADS_HELP) -> None:
    """``--threads``: unset means the rule of ``clover.commands.threads``."""
    p.add_argument("--threads", type=positive_int, help=help)


def add_backend_arg(p: argparse.ArgumentParser) -> None:
    """``--backend``: Clover's PyTorch engine, or its graph in llama.cpp for a GGUF file."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the model: torch, or llama.cpp with --model FILE.gguf from `clover export gguf` (built by "
        "`make llama-cpp`; docs/llama-cpp.md); auto: llama.cpp for a .gguf file, else torch",
    )


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Clover checkpoint directory, or a GGUF file (default: the bundled model)")
    add_backend_arg(p)
    add_decoding_flags(p)  # --block-size, --policy, --threshold, ... (clover.api.settings)
    p.add_argument("--max-tokens", type=int, default=256, help="new tokens at most")
    p.add_argument(
        "--tools",
        choices=["auto", *task_names(), *ALIASES, "none"],
        default="auto",
        help="a task's tools offered in chat (auto: those of the task the model was trained for, if any)",
    )
    add_threads_arg(p)
    add_device_args(p)


def sampling_params(args: argparse.Namespace):
    """The decoding flags as ``SamplingParams``; a flag not given takes its default from there."""
    from clover.engine import SamplingParams  # deferred: torch, which --help does not need

    return SamplingParams(max_tokens=args.max_tokens, **decoding_values(args))


def offered_tools(args, model=None) -> list[dict] | None:
    """The tools offered in --chat: --tools TASK|none, or by default (auto) those of the task the
    model was trained for (the bundled default's airspace set), so its first run calls tools."""
    if args.tools == "none":
        return None
    if args.tools == "auto":
        task = model_task(model.config if model is not None else None)
    else:
        task = get_task(deprecated(args.tools, "clover"))
    return task.offered(model.config if model is not None else None) if task is not None else None


def encode_prompt(tokenizer, text: str) -> list[int]:
    if tokenizer is None:
        raise SystemExit("clover: this checkpoint has no tokenizer.json; cannot encode a text prompt")
    return tokenizer.encode(text)


def decoding_setup(args: argparse.Namespace):
    """Checked decoding settings (a clear exit on a bad one), then the model and tokenizer."""
    try:
        params = sampling_params(args)
    except ValueError as e:
        raise SystemExit(f"clover: {e}") from None
    check_graphs(args, device_setup(args)[0])
    loaded = load_model_and_tokenizer(args.model, args.threads, args.device, args.dtype, args.compile, args.backend)
    return (params, *loaded)
