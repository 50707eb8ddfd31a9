"""Programmatic Dependent Launch on the CPU: every generated kernel begins with the guarded
`griddepcontrol` entry, and the runtime launches a kernel that follows another on its stream
through `cuLaunchKernelEx` with the programmatic attribute (a fake driver here) only where
asked for and on sm_90+; otherwise the CuPy launch path runs."""

from __future__ import annotations

import ctypes
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_prelude import PRELUDE
from optgraph.codegen.cuda_source import LAUNCH_DEPENDENTS, PDL_ENTRY, body_entry
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cuda import pdl as cuda_pdl
from optgraph.runtime.cuda.pdl import LAUNCH_KERNEL_EX, lookup_launch_entry, pdl_steps
from tests.support import cuda_emulator
from tests.support.fake_cupy import fake_cupy

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "codegen_checks").glob("*.ir"))
EXAMPLES = ROOT.parent / "examples"
KERNEL_HEAD = re.compile(
    r'extern "C" __global__ void (?:__launch_bounds__\(\d+, \d+\) )?(\w+)\([^)]*\) \{\n'
)


def test_prelude_guards_the_griddepcontrol_instructions() -> None:
    for instr in ("griddepcontrol.wait;", "griddepcontrol.launch_dependents;"):
        at = PRELUDE.index(instr)
        guard = PRELUDE.rindex("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", 0, at)
        assert "#endif" not in PRELUDE[guard:at]
    assert PDL_ENTRY.index("og_grid_dependency_wait") < PDL_ENTRY.index("launch_dependents")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_kernel_begins_with_the_dependency_wait(path: Path) -> None:
    text = path.read_text()
    run = re.search(r"^# RUN: (.*)$", text, re.MULTILINE)
    graph = og.parse(text, str(path))
    if run and run.group(1).strip() != "none":
        graph = run_pipeline(graph, run.group(1).strip())
    _assert_wait_first(lower_cuda(graph))


# What a kernel that waits itself (`Kernel.self_wait`) may do before its PDL entry: index
# arithmetic on its block and thread, shared-memory declarations, the block-uniform branch to a
# sibling kernel's segment, and 16-byte loads of weight rows into `og_wv0` (one or more a line).
_LOAD = (
    r"og_wv0\[\d+\]\[\d+\] = og_load_stream\((\w+) \+ n0 \+ "
    r"\(unsigned long long\)\(kb \+ \d+u\) \* \d+u\);"
)
_PRELOAD_LINE = re.compile(
    r"(?:[{}]|uint4 og_wv0\[\d+\]\[\d+\];|if \(n0 < \d+u\) \{"
    r"|__shared__ (?:float|bool) og_\w+(?:\[\d+\])*;|if \(tile < \d+u\) \{"
    r"|const unsigned int (?![^;]*(?:\bin\d|\bout\b|\*\())[^\[;]*;"
    rf"|if \(kb \+ \d+u < k1\) \{{(?: {_LOAD})+ \}})"
)


def _preloads(body: str) -> set[str]:
    """The params a self-waiting body loads before its PDL entry (checking that it does nothing
    else there)."""
    entry = body.index("og_grid_dependency_wait();")
    if not body[entry:].startswith(body_entry().replace("\n", "\n  ")):
        _assert_late_trigger(body)
    params: set[str] = set()
    for line in body[:entry].splitlines():
        if not line.strip():
            continue
        assert _PRELOAD_LINE.fullmatch(line.strip()), line
        params.update(re.findall(_LOAD, line))
    assert params, "a self-waiting kernel loads a weight before its entry"
    return params


def _assert_late_trigger(body: str) -> None:
    """A body whose entry is the wait alone (`product_kernel.LATE_TRIGGER_BYTES`): after each wait,
    exactly one trigger, after the product loop (its multiply-adds) and before the block sums."""
    waits = [m.start() for m in re.finditer(r"og_grid_dependency_wait\(\);", body)]
    for at, end in zip(waits, [*waits[1:], len(body)]):
        part = body[at:end]
        assert part.startswith(body_entry(trigger=False)) and part.count(LAUNCH_DEPENDENTS) == 1
        trigger = part.index(LAUNCH_DEPENDENTS)
        assert part.rindex("+= xv * wf") < trigger < part.index("__shfl_xor_sync"), part[:200]


def _assert_wait_first(plan: CudaPlan) -> dict[str, set[str]]:
    """Every kernel's first statements are the PDL entry, or L2 prefetch hints and then the PDL
    entry (`Kernel.early`: no load whose value is used, no store, no atomic before the wait), or
    (`Kernel.self_wait`) weight loads and then the entry, in a merged kernel each member's. Returns
    {kernel: params loaded before the entry} of the self-waiting kernels."""
    preloads: dict[str, set[str]] = {}
    for kernel in plan.kernels.values():
        if not kernel.self_wait:
            _assert_entry_first(kernel.function)
            continue
        head = kernel.function.split(") {\n", 1)[1]
        assert kernel.body is not None and PDL_ENTRY not in head[:80]
        if not kernel.name.startswith("og_merged_"):
            preloads[kernel.name] = _preloads(kernel.body)
            continue
        parts = {
            m.group(1): m.group(2)
            for decl in kernel.decls
            for m in re.finditer(r"void (\w+_part)\([^)]*\) \{\n(.*?)\n\}\n", decl, re.DOTALL)
        }
        for call in re.finditer(r"^ *(.*?)(\w+_part)\(", kernel.body, re.MULTILINE):
            if call.group(1):  # a member that does not wait itself: the entry comes first
                assert call.group(1) == body_entry().replace("\n", " ") + " "
                assert "og_grid_dependency_wait" not in parts[call.group(2)]
            else:
                _preloads(parts[call.group(2)])
    waiting = {k.name for k in plan.kernels.values() if k.self_wait}
    _assert_entry_first(plan.source(), skip=waiting)
    return preloads


def _assert_entry_first(source: str, skip: set[str] | frozenset[str] = frozenset()) -> None:
    """Every kernel of `source` but those named in `skip` begins with the PDL entry, perhaps
    after early statements (L2 prefetch hints)."""
    heads = list(KERNEL_HEAD.finditer(source))
    assert len(heads) == source.count("__global__")  # every kernel (cuBLAS-only plans: none)
    for head in heads:
        if head.group(1) in skip:
            continue
        entry = source.index(PDL_ENTRY, head.end())
        early = source[head.end() : entry]
        assert "}\n}" not in early, head.group(1)  # the entry is in this kernel's own body
        for banned in ("[", "*(", "og_load", "__ld", "atomic", "og_arrive"):
            assert banned not in early, (head.group(1), banned)
        assert not early.strip() or "_prefetch_l2(" in early or "_early(" in early, head.group(1)
    for function in re.finditer(r"void (\w+_early)\([^)]*\) \{\n(.*?)\n\}\n", source, re.DOTALL):
        assert "[" not in function.group(2) and "og_prefetch_l2(" in function.group(2)


def _decode_plan(merge: bool = True) -> CudaPlan:
    sys.path.insert(0, str(EXAMPLES))
    from gen_llama import generate_llama

    graph = og.parse(generate_llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64))
    return lower_cuda(run_pipeline(graph, "default"), merge_launches=merge)


def test_decode_kernels_wait_first_and_products_prefetch_before_waiting(monkeypatch) -> None:
    """With `EARLY_WEIGHTS` off, the one-row products of a decode step (alone and merged)
    prefetch weight rows into L2 before their dependency wait; nothing else happens before it."""
    from optgraph.codegen.kernels.one_row import product_kernel

    monkeypatch.setattr(product_kernel, "EARLY_WEIGHTS", False)
    assert "og_prefetch_l2(in" not in _decode_plan().source()  # off by default
    monkeypatch.setattr(product_kernel, "PREFETCH", True)
    plan = _decode_plan()
    assert _assert_wait_first(plan) == {}
    source = plan.source()
    assert source.count("og_prefetch_l2(in") >= 1 and "_early(" in source


def test_products_load_only_weights_before_their_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """`EARLY_WEIGHTS` (on): every one-row product of a decode step loads its first weight rows
    before its PDL entry, and every param loaded there is bound to the weight buffer. (q/k/v folds
    off: a product that does a rope on an input position also computes its rope factors there,
    `tests/codegen/test_qkv_folds.py`.)"""
    from optgraph.codegen.decode import qkv_folds

    monkeypatch.setattr(qkv_folds, "FOLD_QKV", False)
    plan = _decode_plan(merge=False)
    preloads = _assert_wait_first(plan)
    steps = [s for s in plan.steps if isinstance(s, KernelStep) and s.kernel in preloads]
    assert len(steps) == 3 + 1 + 2 + 1 + 1  # q, k, v, o, gate, up, down, lm head
    for step in steps:
        params = plan.kernels[step.kernel].params
        assert params is not None
        for param in preloads[step.kernel]:
            where = step.args[[p.rsplit(None, 1)[1] for p in params].index(param)]
            assert where.space == "weights", (step.node, param, where)
    merged = _decode_plan()
    assert any(k.self_wait and k.name.startswith("og_merged_") for k in merged.kernels.values())
    _assert_wait_first(merged)


MIXED = """graph mixed {
  input %a : f16[1,64]
  input %b : f16[1,300]
  weight %w : f16[64,96]
  %y = matmul(%a, %w) : f16[1,96]
  %z = neg(%b) : f16[1,300]
  output %y, %z
}
"""


def test_a_merged_kernel_of_waiting_and_plain_members() -> None:
    """A product that loads weights before its wait merged with a kernel that does not: the
    merged kernel has no entry of its own, the plain member's blocks wait before its code."""
    graph = run_pipeline(og.parse(MIXED), PIPELINE)
    plan = lower_cuda(graph)
    (step,) = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert step.members == ("y", "z") and plan.kernels[step.kernel].self_wait
    _assert_wait_first(plan)
    if cuda_emulator.available():
        inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
        got = cuda_emulator.run_plan(plan, inputs, weights)
        want = run_reference(graph, inputs, weights)
        np.testing.assert_array_equal(got["z"], want["z"])
        np.testing.assert_allclose(got["y"].astype(np.float64), want["y"], atol=2e-3)


def test_pdl_steps_only_follow_a_kernel_on_the_same_stream() -> None:
    def k(stream: int) -> KernelStep:
        return KernelStep("n", stream, "og_k", (1, 1, 1), (32, 1, 1), 0, ())

    other = types.SimpleNamespace(stream=0)  # a copy, GEMM, host function or event
    steps = [k(0), k(0), k(1), k(1), other, k(0), k(0), k(1)]
    assert pdl_steps(steps) == {1, 3, 6, 7}


# -- the runtime, with a fake driver ----------------------------------------------------------

PIPELINE = "verify,dce,cse,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"


class _Function:
    def __init__(self, launch: Any, ptr: int):
        self.launch, self.ptr = launch, ptr

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.launch(*args, **kwargs)


class FakeDriverLibrary:
    """libcuda as `pdl` sees it: `cuDriverGetVersion`, `cuGetProcAddress_v2` (recording
    every lookup) and a real ctypes `cuLaunchKernelEx` that reads the config the runtime built."""

    def __init__(self, version: int, launch: Callable[[Any, int, int], int] | None = None):
        self.version = version
        self.lookups: list[tuple[bytes, int, int]] = []
        self.entry = LAUNCH_KERNEL_EX(self._launch)
        self.on_launch = launch

    def cuDriverGetVersion(self, out: Any) -> int:
        out.contents.value = self.version
        return 0

    def cuGetProcAddress_v2(
        self, symbol: bytes, pfn: Any, version: Any, flags: Any, status: Any
    ) -> int:
        self.lookups.append((symbol, version.value, flags.value))
        if symbol != b"cuLaunchKernelEx" or version.value > self.version:
            return 1  # CUDA_ERROR_INVALID_VALUE: what a newer binding's table lookups get
        pfn.contents.value = ctypes.cast(self.entry, ctypes.c_void_p).value
        status.contents.value = 0
        return 0

    def _launch(self, cfg: Any, function: int, params: int, extra: int) -> int:
        config = cfg.contents
        attr = config.attrs[0]
        ok = config.numAttrs == 1 and attr.id == 6 and attr.value.programmatic == 1 and not extra
        if not ok or self.on_launch is None:
            return 1
        return self.on_launch(config, function, params)


def _install_driver(monkeypatch: pytest.MonkeyPatch, fake: Any, cc: str) -> list[str]:
    """A fake libcuda, a device of compute capability `cc`, and kernels with a CUfunction
    pointer; returns the names launched through `cuLaunchKernelEx`."""
    cupy = sys.modules["cupy"]
    names: dict[int, str] = {}
    programmatic: list[str] = []

    class RawModule:
        def __init__(self, code: str, options: tuple[str, ...] = ()):
            self.code = code

        def get_function(self, name: str) -> Any:
            ptr = 0x1000 + len(names)
            names[ptr] = name
            return types.SimpleNamespace(kernel=_Function(fake.kernel(name), ptr))

    def launch(config: Any, function: int, params: int) -> int:
        first = ctypes.c_void_p.from_address(ctypes.c_void_p.from_address(params).value or 0)
        if not first.value or config.blockDimX == 0:
            return 1  # the first argument (the output pointer) must not be null
        name = names[function]
        programmatic.append(name)
        fake.issue(f"KERNEL {name}", lambda: fake.launches.append(name))
        return 0

    library = FakeDriverLibrary(12080, launch)
    monkeypatch.setattr(cuda_pdl, "open_driver_library", lambda: library)
    cuda_pdl.driver_launch.cache_clear()
    monkeypatch.setattr(cupy, "RawModule", RawModule)
    device = types.SimpleNamespace(compute_capability=cc, id=0)
    monkeypatch.setattr(cupy.cuda, "Device", lambda: device, raising=False)
    fake.driver_library = library
    return programmatic


@pytest.mark.parametrize(("cc", "pdl"), [("90", True), ("90", False), ("80", True)])
def test_runtime_launches_programmatically_only_on_sm90_when_asked(monkeypatch, cc, pdl) -> None:
    with fake_cupy(monkeypatch) as fake:
        from optgraph.api.programs import cuda_program
        from optgraph.codegen.lowering_options import LoweringOptions

        programmatic = _install_driver(monkeypatch, fake, cc)
        graph = run_pipeline(og.parse_file(EXAMPLES / "mlp.ir"), PIPELINE)
        program = cuda_program(
            graph, weights=random_weights(graph), options=LoweringOptions(pdl=pdl)
        )
        inputs = random_inputs(graph)
        program.run(inputs)
        program.run(inputs)  # captured
        program.run(inputs)  # replayed
        steps = program.plan().steps
        expected = [steps[i].kernel for i in sorted(pdl_steps(steps))]  # type: ignore[attr-defined]
        kernels = [s.kernel for s in steps if isinstance(s, KernelStep)]
        assert len(fake.launches) == 3 * len(kernels)  # every kernel ran on every run
        if cc == "90" and pdl:
            assert expected, "the example has no kernel after a kernel"
            assert programmatic == expected * 2  # the eager run and the capture; replays reuse
        else:
            assert programmatic == []
        program.close()
        if cc == "90" and pdl:  # one lookup, of the one entry point, at the driver's version
            assert fake.driver_library.lookups == [(b"cuLaunchKernelEx", 12080, 0)]
            options = LoweringOptions(pdl=pdl)
            cuda_program(graph, weights=random_weights(graph), options=options).close()
            assert len(fake.driver_library.lookups) == 1
    cuda_pdl.driver_launch.cache_clear()


@pytest.mark.parametrize("version", [12080, 13000, 11080])
def test_the_launch_entry_is_looked_up_at_the_drivers_version(version: int) -> None:
    library = FakeDriverLibrary(version)
    found = lookup_launch_entry(library)
    assert found is not None and found.driver_version == version
    assert library.lookups == [(b"cuLaunchKernelEx", version, 0)]


def test_an_old_driver_or_a_failed_lookup_means_no_pdl() -> None:
    old = FakeDriverLibrary(11070)
    assert lookup_launch_entry(old) is None and old.lookups == []  # no cuLaunchKernelEx there
    missing = FakeDriverLibrary(12080)
    missing.cuGetProcAddress_v2 = lambda *args: 500  # type: ignore[method-assign]
    assert lookup_launch_entry(missing) is None
    assert lookup_launch_entry(types.SimpleNamespace()) is None  # a library without the API


LARGE_AND_SMALL = """graph large_and_small {
  input %x : f16[1,4096]
  weight %big : f16[4096,1024]
  weight %small : f16[4096,256]
  %a = matmul(%x, %big) : f16[1,1024]
  %b = matmul(%x, %small) : f16[1,256]
  output %a, %b
}
"""


def test_large_products_let_their_dependents_launch_after_their_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`LATE_TRIGGER_BYTES` (4 MiB): the product reading 8 MiB of weights waits alone at its
    entry and triggers after its product loop; the one reading 2 MiB triggers at its wait; with
    the setting 0 both trigger at their wait."""
    from optgraph.codegen.kernels.one_row import product_kernel

    graph = run_pipeline(og.parse(LARGE_AND_SMALL), PIPELINE)

    def bodies() -> dict[str, str]:
        plan = lower_cuda(graph, merge_launches=False)
        _assert_wait_first(plan)
        steps = {s.node: s.kernel for s in plan.steps if isinstance(s, KernelStep)}
        return {node: plan.kernels[kernel].body or "" for node, kernel in steps.items()}

    entry = body_entry().replace("\n", "\n  ")  # as indented in a body
    late = bodies()
    assert late["a"].count(LAUNCH_DEPENDENTS) == 1
    assert entry not in late["a"] and body_entry(trigger=False) in late["a"]
    assert entry in late["b"]
    monkeypatch.setattr(product_kernel, "LATE_TRIGGER_BYTES", 0)
    assert all(entry in body for body in bodies().values())
