"""`optgraph run` refuses up front a run that cannot fit in host memory (issue 36, finding 3).

A verifier-legal graph of `f32[4,99999999]` tensors made `run --check` grow to 16 GB in 54 s
before "not enough memory". The memory a run needs is known before it starts (inputs, weights,
the planned arena and the executor's largest node, the outputs, with --check the reference's
peak of live values: `cli/run_memory.py`); a run over what is available is refused with those
figures before any input or weight is made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph import host_memory
from optgraph.cli import run as run_module
from optgraph.cli import run_memory
from optgraph.cli.main import main

ISSUE_SHAPED = """graph wide {
  input %x : f32[4,99999999]
  weight %w : f32[99999999]
  %a = neg(%x) : f32[4,99999999]
  %b = mul(%a, %w) : f32[4,99999999]
  %c = add(%a, %b) : f32[4,99999999]
  output %c
}
"""
TENSOR = 4 * 99999999 * 4  # bytes of one f32[4,99999999]
GIB = 1 << 30


def _no_values(*args: object, **kwargs: object) -> None:
    raise AssertionError("the run made its inputs and weights before refusing")


def test_a_run_over_the_available_memory_is_refused_with_the_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "wide.ir"
    model.write_text(ISSUE_SHAPED)
    monkeypatch.setattr(host_memory, "available_memory", lambda: (8 * GIB, "a test's figure"))
    monkeypatch.setattr(run_module, "load_values", _no_values)
    assert main(["run", str(model), "--device", "cpu", "--check", "-q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # inputs + weights + outputs + max(arena + fused body's three values, reference's peak)
    need = TENSOR + TENSOR // 4 + TENSOR + max(TENSOR + 3 * TENSOR, 3 * TENSOR + TENSOR)
    assert f"this run needs at least {run_memory.size_text(need)} on the host" in err, err
    assert "inputs 1.49 GiB, weights 381 MiB, cpu arena 1.49 GiB + 4.47 GiB scratch" in err, err
    assert "--check: reference values 5.96 GiB" in err and "8 GiB are available" in err, err


def test_without_check_the_message_says_so_when_it_would_fit() -> None:
    memory = run_memory.RunMemory(
        inputs=GIB, weights=GIB, arena=2 * GIB, scratch=GIB, outputs=GIB, reference=6 * GIB
    )
    assert memory.total == 9 * GIB  # 3 GiB + max(3 GiB executor, 6 GiB reference)
    run_memory.check_run_memory(memory, (9 * GIB, "test"))  # fits exactly: no error
    run_memory.check_run_memory(memory, None)  # unknown: no check
    with pytest.raises(og.OptGraphError, match="without --check it would fit") as err:
        run_memory.check_run_memory(memory, (7 * GIB, "test"))
    assert "needs at least 9 GiB" in str(err.value) and "7 GiB are available (test)" in str(
        err.value
    )
    with pytest.raises(og.OptGraphError) as err:
        run_memory.check_run_memory(memory, (5 * GIB, "test"))
    assert "without --check" not in str(err.value)


def test_a_run_that_fits_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "small.ir"
    model.write_text(ISSUE_SHAPED.replace("99999999", "999"))
    monkeypatch.setattr(host_memory, "available_memory", lambda: (GIB, "a test's figure"))
    assert main(["run", str(model), "--device", "cpu", "--check", "-q"]) == 0


def test_the_reference_peak_counts_what_is_alive_at_once() -> None:
    """x -> a -> b (a read again by c) -> c: a, b and c alive together at c, then c's copy."""
    graph = og.parse(
        """graph g {
  input %x : f32[100]
  %a = neg(%x) : f32[100]
  %b = exp(%a) : f32[100]
  %c = add(%a, %b) : f32[100]
  %d = neg(%c) : f32[100]
  output %d
}"""
    )
    assert run_memory.reference_peak(graph) == 3 * 400 + 400


def test_a_graph_no_machine_can_hold_is_refused_on_this_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No patched figure: this machine's own (1.5 TiB tensors fit nowhere)."""
    if host_memory.available_memory() is None:
        pytest.skip("this system does not say how much memory is available")
    model = tmp_path / "huge.ir"
    model.write_text(ISSUE_SHAPED.replace("[4,", "[4096,"))
    monkeypatch.setattr(run_module, "load_values", _no_values)
    assert main(["run", str(model), "--device", "cpu", "-q"]) == 1
    err = capsys.readouterr().err
    assert "run: not enough memory: this run needs at least" in err and "TiB" in err, err


def test_a_cuda_run_the_device_cannot_hold_is_refused_before_any_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU's free memory (cudaMemGetInfo, here the fake's) against the planned buffers: the
    run compiles first and its runtime refuses before it makes a buffer or a value."""
    from tests.support.fake_cupy import fake_cupy

    model = tmp_path / "wide.ir"
    model.write_text(ISSUE_SHAPED)
    monkeypatch.setattr(run_module, "load_values", _no_values)
    with fake_cupy(monkeypatch) as fake:
        fake.device_free = 2 * GIB
        assert main(["run", str(model), "--device", "cuda", "--check", "-q"]) == 1
        assert fake.allocations == []  # not one device buffer
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error: cuda: not enough memory on the device: at least" in err, err
    assert "weights 381 MiB" in err and "inputs 1.49 GiB" in err, err
    assert "and 2 GiB are available (free on the current GPU" in err, err


def test_a_cuda_run_counts_its_pinned_buffers_on_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inputs, weights and outputs (3.35 GiB) fit in 4 GiB; with the runtime's pinned staging
    of the input and the output (2.98 GiB) they do not."""
    from tests.support.fake_cupy import fake_cupy

    model = tmp_path / "wide.ir"
    model.write_text(ISSUE_SHAPED)
    monkeypatch.setattr(run_module, "load_values", _no_values)
    monkeypatch.setattr(host_memory, "available_memory", lambda: (4 * GIB, "a test's figure"))
    with fake_cupy(monkeypatch):
        assert main(["run", str(model), "--device", "cuda", "-q"]) == 1
    err = capsys.readouterr().err
    assert "run: not enough memory: this run needs at least 6.33 GiB on the host" in err, err
    assert "cuda pinned buffers 2.98 GiB" in err and "4 GiB are available" in err, err
