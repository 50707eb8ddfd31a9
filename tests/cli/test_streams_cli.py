"""The command line parts of the streams work: `compile` counts races and fails on them, writes
a `--timeline` trace and a streams.dot artifact; `dot` prints or renders the assignment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optgraph.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RACY = """graph g {
  input %x : f32[4,8]
  %a = exp(%x) : f32[4,8] !{stream = 1}
  %b = neg(%a) : f32[4,8] !{stream = 0}
  output %b
}
"""


def test_compile_with_races_fails_and_reports_them(tmp_path: Path, capsys) -> None:
    model = tmp_path / "racy.ir"
    model.write_text(RACY)
    report = tmp_path / "report.json"
    assert main(["compile", str(model), "-p", "verify", "--report-json", str(report)]) == 1
    err = capsys.readouterr().err
    assert "racy.ir:4:12: error: race: %b (stream 0) reads %a while %a (stream 1) writes it" in err
    assert "note: %a (stream 1) writes %a here" in err
    assert json.loads(report.read_text())["races"] == 2  # the read, and stream 1 never joined


def test_compile_reports_streams_and_writes_a_timeline(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.json"
    out = tmp_path / "out"
    report = tmp_path / "r.json"
    args = ["compile", str(EXAMPLES / "moe_block.ir"), "--timeline", str(trace), "-o", str(out)]
    assert main([*args, "--report-json", str(report)]) == 0
    figures = json.loads(report.read_text())
    assert figures["races"] == 0 and figures["streams"] > 1 and figures["waits"] > 0
    assert figures["width"] > 1 and figures["estimated_speedup"] > 1.0
    assert figures["critical_path_us"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["tid"] for e in events if e["ph"] == "X"}
    assert len(tracks) == figures["streams"]
    assert (out / "streams.dot").read_text().startswith("digraph")


def test_dot_prints_dot_text(capsys) -> None:
    pipeline = "assign-streams{min-branch-us=0},insert-sync"
    assert main(["dot", str(EXAMPLES / "diamond.ir"), "-p", pipeline]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "diamond"') and "style=dashed" in out


@pytest.mark.parametrize("name", ["d.jpg", "missing/d.dot"])
def test_dot_bad_output_is_a_user_error(tmp_path: Path, capsys, name: str) -> None:
    assert main(["dot", str(EXAMPLES / "diamond.ir"), "-o", str(tmp_path / name)]) == 1
    assert "error" in capsys.readouterr().err
