"""Where a split MoE decode step's time goes (the model and sizes of bench_split.py).

    python benchmarks/split_diagnose.py [--steps 10] [--budget 100] [--layers 4 ...]
    python benchmarks/split_diagnose.py --model qwen3moe --layers 4 [--qwen3moe-expert-dtype q4_k]

It takes bench_split.py's options (its parser: `--model qwen3moe` and the `--qwen3moe-*` options
too, the imported Qwen3-MoE of `harness/moe_imported.py`) and its own `--steps`, `--budget`,
`--modes` and `--timeline`.

Prints as it goes, one section at a time, and stops starting new sections after `--budget`
seconds (each section is short: a few steps of one program):

1. the setting: Python, GIL switch interval, cores, the CUDA context's scheduling flags (spin,
   yield or blocking sync), the BLAS library and its threads, the process's threads by name;
2. per way of running CPU nodes (`LoweringOptions.cpu_nodes`: graph-per-node, graph,
   calling-thread): ms per step, process CPU time per step (cores kept busy: spinning waits
   show here), then the same steps with every CPU node probed (`time.perf_counter` at entry and
   exit, the thread, and where the main thread was at entry, from `sys._current_frames`), in one
   table: per CPU node its time inside the run, the CPU time of the thread that ran it over the
   same span (much less than the time inside: the thread waited, for the GIL or a core), the
   gap before it (since the previous node's exit, or since `run` was called), and the same
   node's NumPy work timed alone in the main thread, in a fresh Python thread, and in a fresh
   thread while the main thread sits in CUDA waits (`Stream.synchronize` of GPU work, as
   while a graph's host functions run: a spinning wait takes a core from BLAS's threads);
3. whether a CUDA wait releases the GIL: a Python thread counts in a loop while the main thread
   sits in `Stream.synchronize`, `Event.synchronize`, and 20 `program.run`s (calling-thread and
   graph ways); the count against the same time with the main thread asleep is the share of
   the GIL it left free (with the counting thread competing for the GIL: the runs' ms show what
   a busy Python thread costs each way);
4. one calling-thread step piece by piece (`--timeline`, on by default): each GPU part's launch
   and its GPU start and end (events recorded on stream 0 around the launch; the GPU clock
   starts at an event recorded as the step starts, after the previous step has finished), each
   host wait and each CPU node, in µs since the step's start (medians over `--steps`): how long
   the GPU waits for the host and the host for the GPU, layer by layer; then the overlap line
   (`harness/split_timeline.py`'s `overlap`, per step, then medians over the steps): the time a
   CPU node runs while some GPU part executes (the intersection of the union of the GPU parts'
   intervals with the union of the CPU nodes'), as a share of the CPU nodes' time and of the
   step, the GPU idle while the host works (is not waiting) and the host waiting while the GPU
   works;
5. a summary line per way: step time, sums of node times, gaps and alone times.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_split import build_parser as bench_parser
from benchmarks.harness.split_plan import plan_graphs
from benchmarks.harness.split_sync_way import moe_weights, step_arrays
from benchmarks.harness.split_timeline import overlap_line, step_timelines
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.runtime.cuda.offload import HostFunction

MODES = ("graph-per-node", "graph", "calling-thread")


class Probe:
    """Records every CPU node's call while `on`: (node, thread id, enter, exit, main's frame,
    the calling thread's CPU time inside the call)."""

    def __init__(self) -> None:
        self.on = False
        self.calls: list[tuple[str, int, float, float, str, float]] = []
        self.main = threading.main_thread().ident
        self.original = HostFunction._call

    def install(self) -> None:
        probe, original = self, self.original

        def probed(fn: HostFunction, arg: int | None) -> None:
            if not probe.on:
                original(fn, arg)
                return
            where = probe.main_frame()
            cpu0, enter = time.thread_time(), time.perf_counter()
            original(fn, arg)
            leave, cpu = time.perf_counter(), time.thread_time() - cpu0
            probe.calls.append((fn.node.name, threading.get_ident(), enter, leave, where, cpu))

        HostFunction._call = probed  # type: ignore[method-assign]

    def main_frame(self) -> str:
        """Where the main thread is (its innermost two Python frames), and how many other
        Python threads there are, with where the first of them is."""
        me = threading.get_ident()
        frames = sys._current_frames()
        where = "(is the main thread)" if me == self.main else _where(frames.get(self.main))
        others = [f for tid, f in frames.items() if tid not in (me, self.main)]
        if others:
            where += f"; {len(others)} other Python thread(s), one at {_where(others[0])}"
        return where


def _where(frame: Any) -> str:
    parts = []
    while frame is not None and len(parts) < 2:
        parts.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(parts)


def say(text: str = "") -> None:
    print(text, flush=True)


def setting(cp: Any) -> None:
    say("== setting")
    say(
        f"python {sys.version.split()[0]}, GIL switch interval {sys.getswitchinterval() * 1e6:.0f} us"
    )
    say(f"cores: {os.cpu_count()} (usable {len(os.sched_getaffinity(0))})")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        say(f"  {var}={os.environ.get(var, '(unset)')}")
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            say(f"  BLAS pool: {pool.get('internal_api')} {pool.get('version')} threads "
                f"{pool.get('num_threads')} ({pool.get('threading_layer')})")  # fmt: skip
    except ImportError:
        say("  (threadpoolctl not installed: BLAS threads unknown)")
    say(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    try:
        cp.cuda.alloc(1)  # the context made current before it is asked for its flags
        lib = ctypes.CDLL("libcuda.so.1")
        flags = ctypes.c_uint(0)
        status = lib.cuCtxGetFlags(ctypes.byref(flags))
        sched = {0: "auto", 1: "spin", 2: "yield", 4: "blocking sync"}.get(flags.value & 7, "?")
        say(f"CUDA context flags {flags.value:#x} (CUresult {status}): scheduling {sched}")
    except (OSError, AttributeError) as err:
        say(f"CUDA context flags: unknown ({err})")


def threads_by_name() -> str:
    names: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            names[Path(f"/proc/self/task/{tid}/comm").read_text().strip()] += 1
        except OSError:
            continue
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(names.items()))


def gil_left_free(wait: Callable[[], Any], seconds: float = 0.2) -> tuple[float, float]:
    """(share of a counting thread's speed kept while the main thread runs `wait`, the wait's
    duration in ms)."""
    stop, count = threading.Event(), [0]

    def counter() -> None:
        while not stop.is_set():
            count[0] += 1

    worker = threading.Thread(target=counter, daemon=True)
    worker.start()
    time.sleep(0.02)
    c0, t0 = count[0], time.perf_counter()
    time.sleep(seconds)
    free_rate = (count[0] - c0) / (time.perf_counter() - t0)
    c0, t0 = count[0], time.perf_counter()
    wait()
    elapsed = time.perf_counter() - t0
    rate = (count[0] - c0) / max(elapsed, 1e-9)
    stop.set()
    worker.join()
    return rate / max(free_rate, 1e-9), elapsed * 1e3


def gil_section(cp: Any, runs: dict[str, Callable[[], Any]]) -> None:
    say("== does the main thread leave the GIL free while it waits? (1.0: fully free)")

    def long_work() -> Any:
        a = cp.ones((4096, 4096), cp.float32)
        for _ in range(40):
            a = a @ a * cp.float32(1e-4)
        return cp.cuda.get_current_stream()

    def stream_wait() -> None:
        long_work().synchronize()

    def event_wait() -> None:
        long_work()
        event = cp.cuda.Event(block=False, disable_timing=True)
        event.record()
        event.synchronize()

    calls = [("Stream.synchronize", stream_wait), ("Event.synchronize", event_wait)]
    calls += [(f"20 x program.run ({mode})", run) for mode, run in runs.items()]
    for what, call in calls:
        try:
            call()  # warm
            share, ms = gil_left_free(call)
        except Exception as err:  # noqa: BLE001 - a diagnostic goes on with the next
            say(f"  {what}: failed ({err!r})")
            continue
        say(
            f"  {what}: {share:.2f} of the GIL left free over {ms:.2f} ms (a Python thread "
            "counting meanwhile)"
        )


def alone_ms(
    fns: list[HostFunction],
    steps: int,
    in_thread: bool,
    main_wait: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """Each CPU node's NumPy work, called in plan order, timed in the main thread or in a fresh
    Python thread while the main thread waits in `join` (or, with `main_wait`, keeps calling
    it: a CUDA wait, as the main thread does while a graph's host functions run): median ms by
    node."""
    times: dict[str, list[float]] = collections.defaultdict(list)

    def loop() -> None:
        for _ in range(steps):
            for fn in fns:
                t0 = time.perf_counter()
                fn._call(None)
                times[fn.node.name].append((time.perf_counter() - t0) * 1e3)

    if in_thread:
        worker = threading.Thread(target=loop)
        worker.start()
        while main_wait is not None and worker.is_alive():
            main_wait()
        worker.join()
    else:
        loop()
    return {n: statistics.median(v) for n, v in times.items()}


def way_section(
    cp: Any, probe: Probe, mode: str, parts: tuple[Any, ...], args: argparse.Namespace
) -> dict[str, float]:
    from optgraph.api.programs import cuda_program

    split, weights, inputs, out = parts
    program = cuda_program(split, weights=weights, options=LoweringOptions(cpu_nodes=mode))
    try:
        for _ in range(3):
            program.run(inputs, out=out)
        walls, cpus = [], []
        for _ in range(args.steps):
            w0, c0 = time.perf_counter(), time.process_time()
            program.run(inputs, out=out)
            walls.append((time.perf_counter() - w0) * 1e3)
            cpus.append((time.process_time() - c0) * 1e3)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        say(f"== {mode}: {wall:.3f} ms/step, process CPU {cpu:.3f} ms/step "
            f"({cpu / wall:.1f} cores busy); threads: {threads_by_name()}")  # fmt: skip
        probe.calls.clear()
        starts = []
        probe.on = True
        for _ in range(args.steps):
            starts.append(time.perf_counter())
            program.run(inputs, out=out)
        probe.on = False
        (variant,) = program._variants.values()
        fns = list(dict.fromkeys(variant.host_functions or variant.calling_thread_functions))
        main = alone_ms(fns, args.steps, in_thread=False)
        other = alone_ms(fns, args.steps, in_thread=True)
        try:
            waiting = alone_ms(fns, args.steps, in_thread=True, main_wait=gpu_wait(cp))
        except Exception as err:  # noqa: BLE001 - a diagnostic goes on without the column
            say(f"  (thread alone with the main thread in a CUDA wait: failed, {err!r})")
            waiting = {}
        return report(probe, starts, fns, (main, other, waiting), wall)
    finally:
        program.close()


def timeline_section(cp: Any, parts: tuple[Any, ...], args: argparse.Namespace) -> None:
    """One calling-thread step piece by piece (see the module docstring, section 4), and the
    overlap of its GPU parts and CPU nodes."""
    from optgraph.api.programs import cuda_program

    split, weights, inputs, out = parts
    program = cuda_program(
        split, weights=weights, options=LoweringOptions(cpu_nodes="calling-thread")
    )
    try:
        for _ in range(3):
            program.run(inputs, out=out)
        timeline = step_timelines(cp, program, partial(program.run, inputs, out=out), args.steps)
    finally:
        program.close()
    say(f"== one calling-thread step, piece by piece (µs since the step's start, medians of "
        f"{args.steps} steps)")  # fmt: skip
    say(f"  {'piece':<34} {'host in':>8} {'host out':>8} {'GPU start':>9} {'GPU end':>8}")
    totals: collections.Counter[str] = collections.Counter()
    for i, name in enumerate(timeline.names):
        rows = [p[i] for p in timeline.pieces if i in p]
        if not rows:
            continue
        cols = [statistics.median(r[j] for r in rows) for j in range(len(rows[0]))]
        gpu = f"{cols[2]:>9.1f} {cols[3]:>8.1f}" if len(cols) == 4 else f"{'':>9} {'':>8}"
        say(f"  {name:<34} {cols[0]:>8.1f} {cols[1]:>8.1f} {gpu}")
        kind = name.split()[0]
        totals[kind] += cols[3] - cols[2] if len(cols) == 4 else cols[1] - cols[0]
    say(f"  step end {statistics.median(timeline.ends):.1f} (the later of run's return and the "
        "last GPU end)")  # fmt: skip
    say(f"  sums: GPU parts {totals['GPU']:.1f} (GPU start to end), host waits "
        f"{totals['host']:.1f}, CPU nodes {totals['cpu']:.1f}")  # fmt: skip
    say("  " + overlap_line(timeline.median_overlap(), args.steps))


def gpu_wait(cp: Any) -> Callable[[], None]:
    """A call that keeps the GPU busy for a few ms and waits for it in `Stream.synchronize`."""
    a = cp.ones((2048, 2048), cp.float32)

    def wait() -> None:
        b = a
        for _ in range(8):
            b = b @ a * cp.float32(1e-4)
        cp.cuda.get_current_stream().synchronize()

    return wait


def report(
    probe: Probe,
    starts: list[float],
    fns: list[HostFunction],
    alone: tuple[dict[str, float], dict[str, float], dict[str, float]],
    wall: float,
) -> dict[str, float]:
    main, other, waiting = alone
    per_step = len(probe.calls) // max(len(starts), 1)
    inside: dict[str, list[float]] = collections.defaultdict(list)
    gaps: dict[str, list[float]] = collections.defaultdict(list)
    where: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    threads = {call[1] for call in probe.calls}
    on_cpu: dict[str, list[float]] = collections.defaultdict(list)
    for s, start in enumerate(starts):
        prev = start
        for name, _, enter, leave, frame, cpu in probe.calls[s * per_step : (s + 1) * per_step]:
            inside[name].append((leave - enter) * 1e3)
            on_cpu[name].append(cpu * 1e3)
            gaps[name].append((enter - prev) * 1e3)
            where[name][frame] += 1
            prev = leave
    ops = {fn.node.name: fn.node.op for fn in fns}
    say(f"  {per_step} CPU node calls per step on {len(threads)} thread(s); ms (medians):")
    say(f"  {'node':<16} {'op':<9} {'in run':>8} {'its CPU':>8} {'gap before':>10} "
        f"{'main alone':>10} {'thread alone':>12} {'thread, main in CUDA wait':>25}  "
        "main thread at entry")  # fmt: skip
    for name, times in inside.items():
        common = where[name].most_common(1)[0][0]
        say(f"  {name:<16} {ops.get(name, '?'):<9} {statistics.median(times):>8.3f} "
            f"{statistics.median(on_cpu[name]):>8.3f} "
            f"{statistics.median(gaps[name]):>10.3f} {main.get(name, float('nan')):>10.3f} "
            f"{other.get(name, float('nan')):>12.3f} {waiting.get(name, float('nan')):>25.3f}  "
            f"{common}")  # fmt: skip
    sums = {
        "step": wall,
        "in_run": sum(statistics.median(v) for v in inside.values()),
        "gaps": sum(statistics.median(v) for v in gaps.values()),
        "main_alone": sum(main.values()),
        "thread_alone": sum(other.values()),
        "thread_main_waiting": sum(waiting.values()),
    }
    say("  sums: " + ", ".join(f"{k} {v:.3f}" for k, v in sums.items()))
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser()
    parser.description = __doc__.split("\n")[0]
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--budget", type=float, default=100.0, help="seconds; then stop")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--timeline", action=argparse.BooleanOptionalAction, default=True,
        help="one calling-thread step piece by piece (section 4)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget
    import cupy as cp

    from optgraph.api.programs import cuda_program

    setting(cp)
    say(f"threads before any program: {threads_by_name()}")
    probe = Probe()
    probe.install()  # before any program: the ctypes callbacks bind the probed method
    source, split, _ = plan_graphs(args)
    if args.model == "qwen3moe":
        from benchmarks.harness import moe_imported

        weights = moe_imported.program_weights(args, split)
        inputs, out = moe_imported.step_arrays(cp, args)
    else:
        weights = moe_weights(source)
        inputs, out = step_arrays(cp, source, args)
    parts = (split, weights, inputs, out)
    summary = {}
    for mode in args.modes.split(","):
        if time.monotonic() > deadline:
            say(f"(budget spent: {mode} skipped)")
            continue
        summary[mode] = way_section(cp, probe, mode, parts, args)
    if args.timeline and time.monotonic() < deadline:
        timeline_section(cp, parts, args)
    if time.monotonic() < deadline:
        programs = {
            mode: cuda_program(split, weights=weights, options=LoweringOptions(cpu_nodes=mode))
            for mode in ("calling-thread", "graph")
        }
        try:
            runs = {}
            for mode, program in programs.items():
                for _ in range(3):
                    program.run(inputs, out=out)
                runs[mode] = partial(lambda p: [p.run(inputs, out=out) for _ in range(20)], program)
            gil_section(cp, runs)
        finally:
            for program in programs.values():
                program.close()
    say("== summary (ms per step: step, CPU nodes inside the run, gaps before them, the same "
        "work alone in the main thread / a fresh thread)")  # fmt: skip
    for mode, sums in summary.items():
        say(f"  {mode:<15} " + "  ".join(f"{k} {v:.3f}" for k, v in sums.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
