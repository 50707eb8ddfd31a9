"""A real decode loop on the GPU: the position advancing, the KV caches updated in place, the
argmax of each step's logits fed back as the next token, with no host round trip in between.

    python benchmarks/bench_decode_loop.py [--model launch|real] [--steps 128] [--repeats 5]
        [--check-steps 16] [--variants og,og-nopdl,torch-graph] [--markdown FILE]

The step graph is `examples/gen_llama.py`'s decode step (the head-to-head suite's `llama_launch`
or `llama_real` sizes) with three nodes appended (`loop_step_graph`): `next_token =
cast(argmax(logits))`, `next_pos = pos + one` and `next_kv_len = kv_len + one`. A step reads
tokens/pos/kv_len from one set of device arrays and writes the next ones into the other (two
bound steps, ping-pong), and writes each cache in place (`kv_cache_write` on its own input), so
`steps` calls run the whole generation on the device; the host only launches.

Measured, per variant: `host+GPU µs/step`, wall-clock (`perf_counter`) from the first launch of
`steps` back-to-back steps to the synchronization after the last, divided by `steps` (the median
over `repeats`): what a generation loop that reads its tokens at the end pays; `GPU µs/step`, CUDA
events around the same loop. Variants: `og` (optgraph, default pipeline and lowering: one CUDA
graph per step through `program.bind`), `og-nopdl` (the same without Programmatic Dependent
Launch), `torch-graph` (the same graph run node by node in PyTorch, captured once as a CUDA graph
with the three feed-back copies inside, replayed).

Correctness: the first `check-steps` tokens of every variant (read back after each step) are
compared with the reference interpreter's loop on the CPU (NumPy, same weights): the table's
`tokens = ref` column says how many agree (f16 rounding may flip a near tie; the count is printed,
never hidden).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import optgraph as og
from benchmarks.harness.timing import print_report
from optgraph.ir.graph import Graph

MODELS = ("launch", "real")


def model_sizes(model: str) -> dict[str, Any]:
    """The head-to-head suite's sizes of `model` (`LLAMA_LAUNCH` or `LLAMA_REAL`)."""
    from benchmarks.harness import head_to_head

    return dict(head_to_head.LLAMA_LAUNCH if model == "launch" else head_to_head.LLAMA_REAL)


FEEDBACK = {"next_token": "tokens", "next_pos": "pos", "next_kv_len": "kv_len"}


def loop_step_graph(sizes: dict[str, Any]) -> Graph:
    """The decode step with the feed-back nodes; outputs: the new caches and the three next
    values (the logits stay inside)."""
    from gen_llama import generate_llama

    text = generate_llama(**sizes)
    lines = text.rstrip().splitlines()
    assert lines[-1].strip() == "}" and lines[-2].strip().startswith("output ")
    caches = [c.strip() for c in lines[-2].strip()[len("output ") :].split(",")][1:]
    vocab = sizes["vocab"]
    batch = sizes["batch"]
    extra = [
        "  input %one : i32[1]",
    ]
    body = [
        f"  %next_token64 = argmax(%logits) {{axis = -1}} : i64[{batch}]",
        f'  %next_token = cast(%next_token64) {{dtype = "i32"}} : i32[{batch}]',
        "  %next_pos = add(%pos, %one) : i32[1]",
        "  %next_kv_len = add(%kv_len, %one) : i32[1]",
        "  output " + ", ".join([*caches, "%next_token", "%next_pos", "%next_kv_len"]),
        "}",
    ]
    if batch != 1 or sizes["seq"] != 1:
        raise ValueError("the decode loop takes batch 1, one token a step")
    head = lines[:-2]
    first_input = next(i for i, line in enumerate(head) if line.strip().startswith("input "))
    graph = og.parse("\n".join([*head[:first_input], *extra, *head[first_input:], *body]))
    assert graph.value_types()["logits"].shape[-1] == vocab
    return graph


def draw_weights(graph: Graph) -> dict[str, Any]:
    """The head-to-head suite's seeded weights, drawn on the GPU."""
    from benchmarks.harness.head_to_head import device_weights

    return device_weights(graph)


def start_values(graph: Graph, cache_fill: int) -> dict[str, np.ndarray]:
    """Seeded caches, the first token, and the position after `cache_fill` cached tokens."""
    from optgraph.reference.interpreter import random_inputs

    values = random_inputs(graph, 0)
    values["tokens"][:] = 1
    values["pos"][:] = cache_fill
    values["kv_len"][:] = cache_fill + 1
    values["one"][:] = 1
    return values


def reference_tokens(
    graph: Graph, weights: dict[str, np.ndarray], values: dict, steps: int
) -> tuple[list[int], list[float]]:
    """The reference interpreter's loop on the CPU: the token after each of `steps` steps, and
    each step's margin (its largest logit less the second largest, as stored): where it is a
    rounding step or two of the logits' dtype, another summation order may pick the other."""
    from dataclasses import replace

    from optgraph.ir.graph import Output
    from optgraph.reference.interpreter import run_reference

    env = {k: v.copy() for k, v in values.items()}
    out_tokens, margins = [], []
    outputs = graph.output_names()
    with_logits = replace(graph, outputs=(*graph.outputs, Output("logits")))
    for _ in range(steps):
        result = run_reference(with_logits, env, weights)
        top = np.sort(result["logits"].astype(np.float64).ravel())[-2:]
        margins.append(float(top[1] - top[0]))
        for name in outputs:
            if name.endswith("_cache_new"):
                env[name[: -len("_new")]] = result[name]
        for new, old in FEEDBACK.items():
            env[old] = result[new].astype(env[old].dtype)
        out_tokens.append(int(env["tokens"][0]))
    return out_tokens, margins


class OptgraphLoop:
    """Two bound steps over ping-pong device arrays; caches in place."""

    def __init__(self, graph: Graph, weights: dict[str, Any], values: dict, pdl: bool):
        import cupy as cp

        from optgraph.api.programs import cuda_program
        from optgraph.codegen.lowering_options import LoweringOptions

        self.cp = cp
        program = cuda_program(
            og.run_pipeline(graph, "default"), weights=weights,
            options=LoweringOptions(pdl=pdl),
        )  # fmt: skip
        self.program = program
        dev = {k: cp.asarray(v) for k, v in values.items()}
        other = {k: cp.asarray(values[k]) for k in FEEDBACK.values()}
        self.sides = [dev, {**dev, **other}]
        self.steps = []
        for me, nxt in ((0, 1), (1, 0)):
            src, dst = self.sides[me], self.sides[nxt]
            out = {new: dst[old] for new, old in FEEDBACK.items()}
            out |= {
                n: src[n[: -len("_new")]] for n in graph.output_names() if n.endswith("_cache_new")
            }
            self.steps.append(program.bind(src, out))
        self.stream = program.stream
        self.count = 0

    def step(self) -> None:
        self.steps[self.count % 2]()
        self.count += 1

    def restart(self, values: dict) -> None:
        """Both sides' tokens/pos/kv_len back to `values` (the caches keep what was written)."""
        self.stream.synchronize()
        for side in self.sides:
            for name in FEEDBACK.values():
                side[name].set(np.asarray(values[name]))
        self.cp.cuda.runtime.deviceSynchronize()
        self.count = 0

    def token(self) -> int:
        self.stream.synchronize()
        return int(self.sides[self.count % 2]["tokens"].get()[0])


class TorchLoop:
    """The step graph node by node in PyTorch, one CUDA graph with the feed-back copies inside."""

    def __init__(self, graph: Graph, weights: dict[str, Any], values: dict):
        import torch

        from benchmarks.harness.torch_interpreter import TorchModel, TorchModule

        self.torch = torch
        interp = TorchModel(graph, device="cuda")
        tw = {k: torch.from_dlpack(self._cupy(v)) for k, v in weights.items()}
        self.env = {k: torch.tensor(np.asarray(v), device="cuda") for k, v in values.items()}
        module = TorchModule(interp, tw).eval()

        def step() -> None:
            out = module(self.env)
            for new, old in FEEDBACK.items():
                self.env[old].copy_(out[new])
            for name in graph.output_names():
                if name.endswith("_cache_new"):
                    cache = self.env[name[: -len("_new")]]
                    if out[name].data_ptr() != cache.data_ptr():
                        cache.copy_(out[name])

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        snapshot = {k: v.clone() for k, v in self.env.items()}
        with torch.cuda.stream(side), torch.no_grad():
            step()  # warm-up (allocator, lazy init)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            step()
        for k, v in snapshot.items():  # the warm-up and the capture advanced nothing we keep
            self.env[k].copy_(v)
        torch.cuda.synchronize()
        import cupy as cp

        self.stream = cp.cuda.Stream.null

    @staticmethod
    def _cupy(v: Any) -> Any:
        import cupy as cp

        return cp.asarray(v)

    def step(self) -> None:
        self.graph.replay()

    def restart(self, values: dict) -> None:
        self.torch.cuda.synchronize()
        for name in FEEDBACK.values():
            self.env[name].copy_(self.torch.tensor(np.asarray(values[name]), device="cuda"))
        self.torch.cuda.synchronize()

    def token(self) -> int:
        self.torch.cuda.synchronize()
        return int(self.env["tokens"][0].item())


def time_loop(loop: Any, steps: int, repeats: int, values: dict) -> tuple[float, float]:
    """(host+GPU µs/step, GPU µs/step), medians over `repeats` loops of `steps` steps, each
    loop started from `values`' position (so every write stays inside the caches)."""
    import cupy as cp

    walls, gpus = [], []
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeats):
        loop.restart(values)
        t0 = time.perf_counter()
        start.record(loop.stream)
        for _ in range(steps):
            loop.step()
        end.record(loop.stream)
        end.synchronize()
        walls.append((time.perf_counter() - t0) * 1e6 / steps)
        gpus.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / steps)
    return statistics.median(walls), statistics.median(gpus)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="launch")
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--check-steps", type=int, default=16)
    p.add_argument("--variants", default="og,og-nopdl,torch-graph")
    p.add_argument("--markdown", metavar="FILE")
    args = p.parse_args(argv)

    import cupy as cp

    sizes = model_sizes(args.model)
    graph = loop_step_graph(sizes)
    # timed loops start at position 0 and stay inside the cache; the check starts at a quarter
    steps = min(args.steps, sizes["cache_len"] - 1)
    fill = sizes["cache_len"] // 4
    if fill + args.check_steps >= sizes["cache_len"]:
        raise SystemExit("--check-steps does not fit the cache")
    args.steps = steps
    weights = draw_weights(graph)
    values = start_values(graph, fill)
    timed_from = start_values(graph, 0)
    host_weights = {k: v.get() for k, v in weights.items()}
    ref, margins = reference_tokens(graph, host_weights, values, args.check_steps)
    print(
        "reference margins (top-1 less top-2 logit) a step:", " ".join(f"{m:.3g}" for m in margins)
    )
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for name in args.variants.split(","):
        if name == "torch-graph":
            loop: Any = TorchLoop(graph, weights, values)
        else:
            loop = OptgraphLoop(graph, weights, values, pdl=name != "og-nopdl")
        got = []
        loop.restart(values)
        for _ in range(args.check_steps):
            loop.step()
            got.append(loop.token())
        agree = sum(a == b for a, b in zip(got, ref))
        first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
        if first is not None:
            print(f"{name}: first token unlike the reference at step {first} (reference margin "
                  f"{margins[first]:.3g} there)", flush=True)  # fmt: skip
        wall, gpu = time_loop(loop, args.steps, args.repeats, timed_from)
        rows.append((name, wall, gpu, agree))
        print(f"{name}: {wall:.1f} µs/step host+GPU, {gpu:.1f} GPU; tokens {agree}/{len(ref)}",
              flush=True)  # fmt: skip
        del loop
    text = table(device, args, rows)
    print_report(text, args.markdown)
    return 0


def table(device: str, args: argparse.Namespace, rows: list[tuple[str, float, float, int]]) -> str:
    import datetime

    lines = [
        (
            f"**{device}, {datetime.date.today().isoformat()}**: decode loop, model "
            f"`{args.model}`, {args.steps} steps a loop, median of {args.repeats} loops"
        ),
        "",
        "| variant | host+GPU µs/step | GPU µs/step | tokens = reference |",
        "|---|---|---|---|",
    ]
    lines += [f"| {n} | {w:.1f} | {g:.1f} | {a}/{args.check_steps} |" for n, w, g, a in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
