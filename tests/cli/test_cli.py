"""The `optgraph` command: compile, opt, run, passes; output files; errors exit 1 with no traceback.

Stream, prefetch and dot specifics are tested next to their passes (test_streams_cli.py, ...).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.cli.artifacts import ARTIFACTS
from optgraph.cli.main import main
from optgraph.cli.report import compute_report
from optgraph.cli.run import cuda_usable
from optgraph.errors import InputError
from optgraph.output_files import write_atomic
from optgraph.passes.manager import PASSES

REPO = Path(__file__).resolve().parents[2]
DIAMOND = str(REPO / "examples" / "diamond.ir")
MLP = str(REPO / "examples" / "mlp.ir")
REPORT_KEYS = {
    "ops",
    "fused_groups",
    "streams",
    "events",
    "waits",
    "arena_bytes",
    "memory_lower_bound_bytes",
    "no_reuse_bytes",
    "splits",
    "copies",
    "streamed_bytes",
    "critical_path_us",
    "races",
    "compile_seconds",
}

DEAD_AND_DUPLICATE = """\
graph g {
  input %x : f32[4]
  %a = exp(%x) : f32[4]
  %b = exp(%x) : f32[4]
  %dead = neg(%x) : f32[4]
  %c = add(%a, %b) : f32[4]
  output %c
}
"""


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def model(tmp_path: Path) -> str:
    path = tmp_path / "m.ir"
    path.write_text(DEAD_AND_DUPLICATE)
    return str(path)


# -- opt -----------------------------------------------------------------------------------------


def test_opt_prints_the_ir_after_the_pipeline(
    model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(["opt", model, "-p", "dce,cse"], capsys)
    assert (status, err) == (0, "")
    expected = og.run_pipeline(og.parse(DEAD_AND_DUPLICATE), "dce,cse")
    assert out == og.print_graph(expected)
    assert "%dead" not in out and "%b" not in out
    assert og.parse(out) == expected


def test_opt_print_ir_after_all(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(["opt", model, "-p", "dce,cse", "--print-ir-after-all"], capsys)
    assert status == 0
    headers = [line for line in out.splitlines() if line.startswith("// -----")]
    assert headers == ["// ----- IR after dce -----", "// ----- IR after cse -----"]
    after_dce, after_cse = out.split("// ----- IR after cse -----\n")
    after_dce = after_dce.removeprefix("// ----- IR after dce -----\n")
    assert "%dead" not in after_dce and "%b = exp" in after_dce
    assert "%b = exp" not in after_cse
    assert og.parse(after_cse) == og.run_pipeline(og.parse(DEAD_AND_DUPLICATE), "dce,cse")


def test_opt_requires_a_pipeline(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["opt", model])
    assert info.value.code == 2
    assert "-p" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("dcee", "<pipeline>:1:1: error: unknown pass 'dcee' (did you mean 'dce'?)"),
        ("cse{foo=1}", "<pipeline>:1:1: error: cse: unknown option 'foo' (cse takes no options)"),
    ],
)
def test_bad_pipeline_is_one_error(
    model: str, pipeline: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(["opt", model, "-p", pipeline], capsys)
    assert (status, out) == (1, "")
    assert err.splitlines()[0] == message
    assert err.splitlines()[1:] == [f"    1 | {pipeline}", "      | ^" + "~" * (len(pipeline) - 1)]


# -- passes --------------------------------------------------------------------------------------


def test_passes_lists_every_pass_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(["passes"], capsys)
    assert status == 0
    for name, cls in PASSES.items():
        assert name in out
        assert cls.summary[:40] in out.replace("\n", " ") or cls.summary.split()[0] in out


# -- compile -------------------------------------------------------------------------------------


def test_compile_prints_a_report_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(["compile", MLP, "--quiet"], capsys)
    assert (status, err) == (0, "")
    assert "optgraph compile: mlp" in out
    for label in ("ops", "fused groups", "arena bytes", "compile time (s)"):
        assert label in out


def test_compile_report_json_has_the_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "report.json"
    status, out, _ = cli(["compile", MLP, "-p", "dce,cse", "--report-json", str(target)], capsys)
    assert status == 0
    figures = json.loads(target.read_text())
    assert REPORT_KEYS <= set(figures)
    assert figures["ops"] == 8  # mlp.ir: 8 nodes, nothing to remove
    assert figures["fused_groups"] == 0
    assert figures["streams"] is None  # no stream assignment in this pipeline
    assert figures["arena_bytes"] is None and figures["no_reuse_bytes"] is None
    assert figures["events"] == 0 and figures["waits"] == 0
    assert isinstance(figures["compile_seconds"], float) and figures["compile_seconds"] > 0
    assert f"wrote {target}" in out


def test_compile_output_dir_writes_artifacts_atomically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out" / "nested"
    status, _, _ = cli(["compile", DIAMOND, "-o", str(out_dir)], capsys)
    assert status == 0
    names = {p.name for p in out_dir.iterdir()}
    assert {"model.opt.ir", "report.json"} <= names
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".")]
    optimized = og.parse_file(out_dir / "model.opt.ir")
    og.verify(optimized)
    assert optimized == og.run_pipeline(og.parse_file(DIAMOND), "default")
    assert REPORT_KEYS <= set(json.loads((out_dir / "report.json").read_text()))
    # Files get the usual permissions, not mkstemp's 0600.
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((out_dir / "model.opt.ir").stat().st_mode) == 0o666 & ~mask


def test_compile_output_dir_writes_the_lowered_plan_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from optgraph.codegen.lower_cuda import lower_for_cuda
    from optgraph.codegen.lowered_plan_text import lowered_plan_text

    llama = REPO / "examples" / "llama_decode.ir"
    status, out, _ = cli(["compile", str(llama), "-o", str(tmp_path), "-q"], capsys)
    assert status == 0 and f"wrote {tmp_path / 'lowered_plan.txt'}" in out
    text = (tmp_path / "lowered_plan.txt").read_text()
    planned = og.run_pipeline(og.parse_file(llama), "default")
    assert text == lowered_plan_text(lower_for_cuda(planned))
    assert "qkv_folds          %l0.k in og_gemv_" in text and "early_cache_reads  %l1.attn" in text


def test_compile_into_a_file_instead_of_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status, _, err = cli(["compile", DIAMOND, "-o", str(blocker), "-q"], capsys)
    assert status == 1
    assert err == f"error: cannot write outputs to '{blocker}': it is not a directory\n"
    assert blocker.read_text() == "x"


def test_artifacts_have_unique_names() -> None:
    names = [a.filename for a in ARTIFACTS]
    assert len(names) == len(set(names))
    assert names[:2] == ["model.opt.ir", "report.json"]


def test_write_atomic_replaces_whole_file_and_reports_errors(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old")
    write_atomic(target, "new text\n")
    assert target.read_text() == "new text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    with pytest.raises(InputError, match="does not exist"):
        write_atomic(tmp_path / "missing" / "a.txt", "x")
    with pytest.raises(InputError, match="is a directory"):
        write_atomic(tmp_path, "x")


# -- report --------------------------------------------------------------------------------------

SCHEDULED = """\
graph g {
  input %x : f32[4,8]
  %a = exp(%x) : f32[4,8] !{stream = 0, offset = 0, size = 128}
  %r = reshape(%a) {shape = [32]} : f32[32] !{stream = 0}
  %b = neg(%x) : f32[4,8] !{stream = 1, offset = 128, size = 128}
  record ^e0 !{stream = 1}
  wait ^e0 !{stream = 0}
  %c = fused(%a, %b) : f32[4,8] !{stream = 0, offset = 256, size = 128} body(%p, %q) {
    %t = add(%p, %q) : f32[4,8]
    yield %t
  }
  output %c, %r
}
"""


def test_report_figures_read_off_the_graph() -> None:
    report = compute_report(og.parse(SCHEDULED), compile_seconds=0.5)
    assert report.ops == 4
    assert report.fused_groups == 1
    assert report.streams == 2
    assert (report.events, report.waits) == (1, 1)
    assert report.arena_bytes == 384  # max(offset + size)
    assert report.no_reuse_bytes == 384  # the aliasing reshape owns no buffer
    assert report.copies is None and report.streamed_bytes is None
    assert report.compile_seconds == 0.5
    assert REPORT_KEYS <= set(json.loads(report.to_json()))


def test_report_of_an_unscheduled_graph_leaves_pass_figures_null() -> None:
    report = compute_report(og.parse(DEAD_AND_DUPLICATE))
    assert report.ops == 4
    assert report.streams is None
    assert report.arena_bytes is None and report.no_reuse_bytes is None
    assert report.copies is None and report.compile_seconds is None


# -- run -----------------------------------------------------------------------------------------


def test_run_on_cpu_prints_output_statistics(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(["run", MLP, "--device", "cpu", "--seed", "3", "-q"], capsys)
    assert (status, err) == (0, "")
    assert "%logits" in out and "[4,10]" in out and "f32" in out
    for column in ("mean", "std", "min", "max"):
        assert column in out


def test_run_check_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(["run", DIAMOND, "--device", "cpu", "--check"], capsys)
    assert status == 0
    assert "%y" in out


def test_run_with_inputs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from optgraph.reference.interpreter import random_weights, run_reference

    x = np.full((4, 64), 0.25, dtype=np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    status, out, _ = cli(
        ["run", DIAMOND, "--device", "cpu", "--inputs", str(tmp_path / "in.npz")], capsys
    )
    assert status == 0
    graph = og.parse_file(DIAMOND)
    expected = run_reference(graph, {"x": x}, random_weights(graph, 0))["y"]
    assert f"{float(np.mean(expected.astype(np.float64))):.6g}" in out


@pytest.mark.parametrize("flag", ["--inputs", "--weights"])
def test_run_missing_values_file(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(["run", DIAMOND, "--device", "cpu", flag, "nope.npz"], capsys)
    assert (status, out) == (1, "")
    # The model was read (its phase line), then the failing phase printed only its error.
    assert err.startswith(f"optgraph: parse + verify {DIAMOND}: ")
    assert err.endswith(f"s (7 nodes)\nerror: {flag}: no such file: 'nope.npz'\n")


@pytest.mark.skipif(cuda_usable(), reason="a GPU is usable here")
def test_run_cuda_without_gpu_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(["run", DIAMOND, "--device", "cuda"], capsys)
    assert (status, out) == (1, "")
    assert "no usable CUDA GPU" in err and "--device cpu" in err
    assert "Traceback" not in err


@pytest.mark.skipif(cuda_usable(), reason="a GPU is usable here")
def test_run_defaults_to_cpu_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(["run", DIAMOND], capsys)
    assert status == 0
    assert "on cpu" in out
