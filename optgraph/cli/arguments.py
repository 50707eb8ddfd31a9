"""The `optgraph` command line's arguments: one argparse parser, a subparser per command.

`build_parser()` knows every command's options and nothing of what the commands do: `cli.main`
parses, then runs the command named by `args.command`. Option types that need more than argparse
(`--seed`: `run.seed_value`; `--version`: `info.version`) import their module only when
used, so `--help` starts as fast as `cli` itself.

    build_parser().parse_args(["run", "model.ir", "--check"])
    ->  Namespace(command="run", model="model.ir", check=True, device=None, devices=1, ...)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


class VersionAction(argparse.Action):
    """`--version`: print `optgraph X.Y.Z` and exit 0, like argparse's own version action, but
    reading the version only when asked (importlib.metadata is not free at start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version of optgraph and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from optgraph.cli.info import version

        sys.stdout.write(f"optgraph {version()}\n")
        parser.exit()


DEVICES = ("cpu", "cuda")
NO_MERGE_HELP = (
    "one launch per kernel (do not merge independent kernels of a stream); the stream cost "
    "model plans for it too (assign-streams{merged-launches=false})"
)
VRAM_HELP = "e.g. 2GiB: stream the weights that do not fit (appends plan-prefetch{budget=SIZE})"
VRAM_EXPERTS_HELP = VRAM_HELP[:-1] + (
    "; a graph with moe nodes first puts the first layers' experts on the CPU: "
    "split-experts{budget=SIZE})"
)
QUIET_HELP = "no progress on stderr (by default: a live line on a terminal, else a line per phase)"


def _seed(text: str) -> int:
    """`--seed`'s type: `run.seed_value`, imported only when a seed is given."""
    from optgraph.cli.run import seed_value

    return seed_value(text)


def _device_count(text: str) -> int:
    """`--devices`' type: an integer from 1 to 1024."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a device count, got '{text}'") from None
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"expected 1 to 1024 devices, got {value}")
    return value


def _add_compile(sub: Any) -> None:
    p = sub.add_parser("compile", help="run a pipeline and report what it decided")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default: default)")
    p.add_argument("-o", "--output", metavar="DIR", help="write model.opt.ir, report.json, ...")
    p.add_argument("--report-json", metavar="FILE", help="write the report figures as JSON")
    p.add_argument("--vram-budget", metavar="SIZE", help=VRAM_EXPERTS_HELP)
    p.add_argument(
        "--timeline", metavar="FILE.json", help="write the estimated schedule as a Chrome trace"
    )
    p.add_argument(
        "--no-merge-launches",
        action="store_true",
        help=NO_MERGE_HELP + "; -o writes that plan (kernels.cu, cuda_plan.json)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run on seeded random or given inputs and weights")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when usable, else cpu")
    p.add_argument("--check", action="store_true", help="compare with the reference interpreter")
    p.add_argument(
        "--devices",
        type=_device_count,
        default=1,
        metavar="N",
        help="N devices: cuda, N GPUs (a process each, NCCL); cpu, N emulated devices (a graph "
        "without device annotations is split first)",
    )
    p.add_argument("--inputs", metavar="FILE.npz", help="input arrays by name")
    p.add_argument("--weights", metavar="FILE", help="weights (.npz, .safetensors or .gguf)")
    p.add_argument("--seed", type=_seed, default=0, help="seed for random inputs and weights")
    p.add_argument("-p", "--pipeline", default="default", help="pipeline for --device cuda")
    p.add_argument(
        "--save-outputs", metavar="FILE.npz", help="write the outputs by name (as --inputs reads)"
    )
    p.add_argument(
        "--node-times",
        metavar="FILE.json",
        help="cuda, one GPU: write each node's device time, measured one node at a time "
        "(plan-prefetch{times=FILE.json} reads it)",
    )
    p.add_argument(
        "--no-graph", action="store_true", help="cuda: launch eagerly, no CUDA graph (debugging)"
    )
    p.add_argument(
        "--no-pdl",
        action="store_true",
        help="cuda: plain kernel launches, no Programmatic Dependent Launch (sm_90+)",
    )
    p.add_argument("--no-merge-launches", action="store_true", help=NO_MERGE_HELP)
    p.add_argument(
        "--vram-budget", metavar="SIZE", help=VRAM_EXPERTS_HELP + " (cpu: planned executor)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)


def _tokens(text: str) -> list[int]:
    """`--tokens`' type: `generate.token_list`, imported only when given."""
    from optgraph.cli.generate import token_list

    return token_list(text)


def _add_generate(sub: Any) -> None:
    p = sub.add_parser("generate", help="text from a model: checkpoint dir, .gguf, or .ir")
    p.add_argument("model", metavar="MODEL", help="checkpoint directory, MODEL.gguf or MODEL.ir")
    g = p.add_argument_group("prompt (one of)")
    g.add_argument("--prompt", metavar="TEXT")
    g.add_argument(
        "--prompt-file",
        metavar="FILE",
        help="one prompt a line: generated together (a GGUF file) or in turn; "
        "stdout holds one block a prompt, in order",
    )
    g.add_argument("--tokens", type=_tokens, metavar="1,2,3", help="token ids, no tokenizer")
    g.add_argument("--chat", action="store_true", help="through the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="default 64")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at end-of-sequence")
    g = p.add_argument_group("sampling (default greedy)")
    g.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0: greedy")
    g.add_argument("--top-k", type=int, default=0, metavar="K", help="0: off")
    g.add_argument("--top-p", type=float, default=1.0, metavar="P", help="1: off")
    g.add_argument("--seed", type=_seed, default=0, help="sampling seed (default 0)")
    p.add_argument("--device", choices=DEVICES, help="default: cuda when usable, else cpu")
    p.add_argument(
        "--dtype", choices=("f32", "f16", "bf16"), help="default: f32 on cpu, f16 on cuda"
    )
    p.add_argument(
        "--context", type=int, metavar="N", help="KV cache positions (default: model's, <= 4096)"
    )
    p.add_argument("--weights", metavar="FILE", help="an .ir model's weights")
    p.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json, a checkpoint dir or .gguf")
    p.add_argument("--json", metavar="FILE", help="write tokens, text and figures as JSON")
    p.add_argument(
        "--cache-dir", metavar="DIR", help="compiled programs (default ~/.cache/optgraph)"
    )
    p.add_argument("--no-cache", action="store_true", help="compile every time, store nothing")
    p.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default: default)")
    p.add_argument("--vram-budget", metavar="SIZE", help=VRAM_HELP)
    p.add_argument("--no-merge-launches", action="store_true", help=NO_MERGE_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP + "; no figures")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optgraph", description="Graph-optimization compiler for GPU inference graphs."
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_compile(sub)

    p = sub.add_parser("dot", help="draw the stream assignment (DOT text, .svg or .png)")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default: default)")
    p.add_argument(
        "-o", "--output", metavar="FILE", help=".dot, .svg or .png (default: DOT on stdout)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)

    p = sub.add_parser("opt", help="print the IR after the given passes")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", required=True, help="e.g. dce,cse")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after each pass")

    _add_run(sub)
    _add_generate(sub)

    p = sub.add_parser("import", help="a model in: MODEL.onnx, .pt2 or .gguf to MODEL.ir")
    p.add_argument("model", metavar="MODEL.onnx|MODEL.pt2|MODEL.gguf")
    p.add_argument("-o", "--output", metavar="MODEL.ir", required=True, help="the IR to write")
    p.add_argument("--weights-out", metavar="W.safetensors", help="write the weights (or .npz)")
    g = p.add_argument_group("GGUF (the step to build)")
    g.add_argument("--mode", choices=("decode", "prefill"), default="decode")
    g.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    g.add_argument("--seq", type=int, default=1, help="new tokens per sequence (default 1)")
    g.add_argument(
        "--cache-len", type=int, help="decode: cached positions (default the context, <= 4096)"
    )
    g.add_argument(
        "--dtype", choices=("f32", "f16", "bf16"), help="activations (default from the weights)"
    )

    p = sub.add_parser("passes", help="list every pass with its options")
    return parser
