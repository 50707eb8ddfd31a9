"""A diffusion step on the GPU: diffusers' SD-1.5 UNet, resident against PyTorch, and streamed
under a VRAM budget (issue #34, part 3).

    python benchmarks/bench_diffusion.py [--scale 1] [--latent 64] [--batch 2] [--ratio 3]
        [--variants resident,sync,depth 1,depth 2] [--torch eager,graph,compile]
        [--iters 5] [--repeats 3] [--markdown FILE] [--json FILE] [--profile FILE]
        [--measured TIMES.json]
    python benchmarks/bench_diffusion.py --dry-run --scale 5    # no GPU: the import, the plans

The model is diffusers' `UNet2DConditionModel` with SD-1.5's configuration (channels 320, 640,
1280, 1280, two layers a block, cross-attention to 77 text tokens of width 768, 32 norm groups;
`--scale k` divides the channels by k for a quick look), random weights (seed 0) in f16, one
denoising step of a `--batch` of `--latent`² latents (2: classifier-free guidance's pair). It is
imported with `og.from_torch` (torch.export) and planned once with `PLAN`.

| variant | what runs |
|---|---|
| resident | every weight on the device, one CUDA graph |
| sync | `plan-prefetch{sync=true}` under the budget: each segment copied right before its readers |
| depth N | `plan-prefetch{depth=N}`: a copy stream fills a ring of N segments ahead of compute |
| depth 2, measured | `--measured`: depth 2 planned with the resident step's node times measured on the device (`runtime/cuda/node_times.py`, `plan-prefetch{times=}`) instead of the roofline |
| copy alone | the depth-2 program's own weight copies back to back on one stream |
| torch eager / graph / compile | the same module in PyTorch: eager, `torch.cuda.graph`, `torch.compile` (max-autotune-no-cudagraphs) |

The budget is what the step needs besides its weights + (weight bytes) / `--ratio` (3: a third of
the weights fit). Each figure is the median of `--repeats` timings of `--iters` back-to-back steps
between CUDA events. Reported: ms a step; depth 2 / max(copy alone, resident) (target <= 1.10);
depth 2 / sync (target <= 0.6); resident against each PyTorch way; whether every streamed
program's output equals the resident one's bit for bit, and the resident output's NMSE against
PyTorch eager (f16 both).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness.offload_plan import describe, streamed_plans
from benchmarks.harness.timing import print_report
from optgraph.analysis.segments import format_size
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline

PLAN = "verify,dce,cse,fuse,assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
STREAMED = {"sync": ",sync=true", "depth 1": ",depth=1", "depth 2": ",depth=2"}
MEASURED = "depth 2, measured"  # depth 2 planned with the resident step's measured node times
SD15_CHANNELS = (320, 640, 1280, 1280)
NORM_GROUPS = 32
NOMINAL_PINNED = 50e9  # bytes/s a dry run plans with (an H100/H200 host link, about)


def build_unet(args: argparse.Namespace) -> Any:
    """diffusers' UNet2DConditionModel with SD-1.5's configuration, channels / `--scale`."""
    import torch
    from diffusers import UNet2DConditionModel

    channels = tuple(c // args.scale for c in SD15_CHANNELS)
    if any(c % NORM_GROUPS or c % 8 for c in channels):
        raise SystemExit(f"--scale {args.scale}: channels {channels} must be multiples of 32")
    torch.manual_seed(0)
    return UNet2DConditionModel(
        sample_size=args.latent,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=channels,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=768,
        attention_head_dim=8,
        norm_num_groups=NORM_GROUPS,
    ).eval()


def unet_step(unet: Any) -> Any:
    """One denoising step as a module of three tensors (what torch.export and the timings call)."""
    import torch

    class UnetStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unet = unet

        def forward(self, latent: Any, timestep: Any, text: Any) -> Any:
            return self.unet(latent, timestep, encoder_hidden_states=text, return_dict=False)[0]

    return UnetStep().eval()


def step_inputs(args: argparse.Namespace) -> tuple[Any, ...]:
    """Seeded f16 latents and text, the timestep 500, for a batch of `--batch`."""
    import torch

    g = torch.Generator().manual_seed(1)
    latent = torch.randn(args.batch, 4, args.latent, args.latent, generator=g)
    text = torch.randn(args.batch, 77, 768, generator=g)
    return latent.half(), torch.full((args.batch,), 500), text.half()


def imported(args: argparse.Namespace) -> tuple[Graph, dict[str, np.ndarray], Any, tuple]:
    """(graph, weights, the f16 torch module, its example inputs)."""
    from optgraph.frontends.torch_export import from_torch

    module = unet_step(build_unet(args).half())
    example = step_inputs(args)
    start = time.perf_counter()
    graph, weights = from_torch(module, example)
    print(
        f"imported in {time.perf_counter() - start:.1f} s: {len(graph.nodes)} nodes, weights "
        f"{format_size(sum(w.type.nbytes for w in graph.weights))}",
        flush=True,
    )
    return graph, dict(weights), module, example


def plan_variants(
    graph: Graph, args: argparse.Namespace, pinned: float
) -> tuple[dict[str, Graph], int]:
    """The resident plan and each streamed variant's, under the `--ratio` budget."""
    names = [n for n in args.variants.split(",") if n != "resident"]
    resident = run_pipeline(graph, PLAN)
    return streamed_plans(resident, args.ratio, pinned, {n: STREAMED[n] for n in names})


def _torch_runner(way: str, model: Any, env: tuple) -> Any:
    """A call of one step of `model` the PyTorch `way`: eager, a CUDA graph, or torch.compile."""
    import torch

    if way == "graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(*env)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            model(*env)
        return graph.replay
    if way == "compile":
        torch._dynamo.reset()
        model = torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)
    elif way != "eager":
        raise SystemExit(f"--torch: eager, graph or compile, not {way!r}")

    def run() -> Any:
        with torch.no_grad():
            return model(*env)

    return run


def torch_variants(
    module: Any, example: tuple, args: argparse.Namespace
) -> tuple[dict[str, float], np.ndarray]:
    """ms a step of each `--torch` way (none: `--torch ''`), and eager's output."""
    import torch

    from benchmarks.harness.torch_interpreter import time_us

    model = module.cuda()
    env = tuple(t.cuda() for t in example)
    with torch.no_grad():
        want = model(*env).float().cpu().numpy()
    ways: dict[str, float] = {}
    for way in filter(None, args.torch.split(",")):
        ways[f"torch {way}"] = time_us(_torch_runner(way, model, env), args.iters, args.repeats)
        ways[f"torch {way}"] /= 1000
        print(f"  torch {way}: {ways[f'torch {way}']:.2f} ms", flush=True)
    model.cpu()
    torch.cuda.empty_cache()
    return ways, want


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import cupy as cp

    from benchmarks.harness.offload_timing import pinned_bandwidth, time_programs
    from optgraph.reference.interpreter import nmse

    pinned = pinned_bandwidth(cp)
    graph, weights, module, example = imported(args)
    graphs, budget = plan_variants(graph, args, pinned)
    inputs = {i.name: t.numpy() for i, t in zip(graph.inputs, example)}
    if args.measured:
        times = measure_times(cp, graphs["resident"], weights, inputs, args.measured)
        options = f"budget={budget},host-bandwidth={int(pinned)},depth=2,times={times}"
        graphs[MEASURED] = run_pipeline(graphs["resident"], f"plan-prefetch{{{options}}}")
    print("\n".join(describe(graphs, budget)), flush=True)
    row: dict[str, Any] = {"budget": budget, "pinned": pinned}
    timings, exact, first = time_programs(cp, graphs, weights, inputs, args, digits=2)
    row.update(timings)
    (resident_out,) = first.values()
    row["exact"] = exact
    if args.profile:
        profile_resident(cp, graphs["resident"], weights, inputs, args.profile)
    ways, want = torch_variants(module, example, args)
    row.update(ways)
    row["nmse_vs_torch"] = nmse(resident_out.astype(np.float64), want.astype(np.float64))
    if args.profile:
        profile_torch(cp, module, example, args.profile)
    return row


def measure_times(
    cp: Any, graph: Graph, weights: dict[str, np.ndarray], inputs: dict[str, Any], path: str
) -> str:
    """Each node's device time in the resident program (`runtime/cuda/node_times.py`), written
    to `path` for `plan-prefetch{times=}`; returns the path."""
    from optgraph.api.programs import cuda_program
    from optgraph.runtime.cuda.node_times import write_times

    program = cuda_program(graph, weights=weights)
    program.run(inputs)
    times = program.node_times()
    program.close()
    write_times(times, path)
    print(f"  node times: {sum(times.values()) * 1e3:.2f} ms over {len(times)} nodes", flush=True)
    return path


def profile_resident(
    cp: Any, graph: Graph, weights: dict[str, np.ndarray], inputs: dict[str, Any], path: str
) -> None:
    """The resident step's GPU time by kernel family and by kernel (CUPTI), written to `path`."""
    from benchmarks.harness.head_to_head_variants import kernel_profile
    from optgraph.api.programs import cuda_program

    program = cuda_program(graph, weights=weights)
    program.run(inputs)
    program.run(inputs)
    exec_, stream = program._cache.get(program.last_key).exec, program.stream

    def replay() -> None:
        cp.cuda.runtime.graphLaunch(exec_, stream.ptr)

    text = "optgraph resident, by family\n" + kernel_profile(replay, stream)
    text += "\n\noptgraph resident, by kernel\n" + kernel_profile(replay, stream, by_kernel=True)
    ops = {n.name: f"{n.op} {n.type}" for n in graph.nodes}
    users: dict[str, list[str]] = {}
    for step in program.lowered.main.plan.steps:
        kernel = getattr(step, "kernel", None)
        if isinstance(kernel, str):
            users.setdefault(kernel[:40], []).append(f"%{step.node} = {ops.get(step.node, '?')}")
    text += "\n\nkernels' nodes\n" + "\n".join(
        f"  {k}: {len(v)} launches, e.g. {v[0]}" for k, v in sorted(users.items())
    )
    Path(path).write_text(text + "\n")
    program.close()


def profile_torch(cp: Any, module: Any, example: tuple, path: str) -> None:
    """PyTorch eager's GPU time by kernel (CUPTI), appended to `path`."""
    from benchmarks.harness.head_to_head_variants import kernel_profile

    model = module.cuda()
    env = tuple(t.cuda() for t in example)
    run = _torch_runner("eager", model, env)
    text = kernel_profile(run, cp.cuda.Stream.null, by_kernel=True)
    with Path(path).open("a") as f:
        f.write("\ntorch eager, by kernel\n" + text + "\n")
    model.cpu()


def table(row: dict[str, Any], args: argparse.Namespace, device: str) -> str:
    streamed = [n for n in (*STREAMED, MEASURED) if n in row]
    torch_ways = [k for k in row if k.startswith("torch ")]
    head = (
        f"**{device}, {datetime.date.today().isoformat()}**, SD-1.5 UNet (channels / "
        f"{args.scale}), f16, batch {args.batch}, latent {args.latent}², budget "
        f"{format_size(row['budget'])} (1/{args.ratio} of the weights fit), pinned "
        f"host-to-device {row['pinned'] / 1e9:.1f} GB/s, same run."
    )
    lines = [
        head,
        "",
        "| resident | " + " | ".join(streamed) + " | copy alone | "
        "depth 2 / max(copy, compute) | depth 2 / sync | exact |",
        "|" + "---|" * (5 + len(streamed)),
    ]
    ratios = []
    for name in ("depth 2", MEASURED):
        d2 = row.get(name)
        overlap = d2 / max(row["copy alone"], row["resident"]) if d2 else float("nan")
        vs_sync = d2 / row["sync"] if d2 and "sync" in row else float("nan")
        ratios.append((overlap, vs_sync))
    both = MEASURED in row
    lines.append(
        f"| {row['resident']:.2f} ms | "
        + " | ".join(f"{row[n]:.2f} ms" for n in streamed)
        + f" | {row.get('copy alone', float('nan')):.2f} ms | "
        + (
            f"{ratios[0][0]:.3f} (measured plan {ratios[1][0]:.3f}) | "
            f"{ratios[0][1]:.3f} (measured plan {ratios[1][1]:.3f})"
            if both
            else f"{ratios[0][0]:.3f} | {ratios[0][1]:.3f}"
        )
        + f" | {'yes' if row['exact'] else 'NO'} |"
    )
    lines += [
        "",
        "| optgraph resident | " + " | ".join(torch_ways) + " | NMSE vs torch eager |",
        "|" + "---|" * (2 + len(torch_ways)),
        f"| {row['resident']:.2f} ms | "
        + " | ".join(f"{row[w]:.2f} ms ({row[w] / row['resident']:.2f}x)" for w in torch_ways)
        + f" | {row['nmse_vs_torch']:.2e} |",
    ]
    return "\n".join(lines) + "\n"


def dry_run(args: argparse.Namespace) -> None:
    graph, _, _, _ = imported(args)
    graphs, budget = plan_variants(graph, args, NOMINAL_PINNED)
    print(f"plans at {NOMINAL_PINNED / 1e9:.0f} GB/s pinned:")
    print("\n".join(describe(graphs, budget)))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=1, help="divide SD-1.5's channels by this")
    p.add_argument("--latent", type=int, default=64, help="latent height and width")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--ratio", type=int, default=3, help="weight bytes / the room the budget leaves")
    p.add_argument("--variants", default="resident,sync,depth 1,depth 2")
    p.add_argument("--torch", default="eager,graph,compile", help="PyTorch ways, or ''")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--profile", metavar="FILE", help="per-kernel GPU times (CUPTI) to FILE")
    p.add_argument(
        "--measured",
        metavar="FILE.json",
        help="also plan depth 2 with the resident step's measured node times (written to FILE)",
    )
    p.add_argument("--dry-run", action="store_true", help="import and plan only, no GPU")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v != "resident" and v not in STREAMED]
    if unknown:
        p.error(f"--variants: resident, {', '.join(STREAMED)}; not {', '.join(unknown)}")
    if args.dry_run:
        dry_run(args)
        return 0
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    row = measure(args)
    text = table(row, args, device)
    print_report(text, args.markdown)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "row": row}, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
