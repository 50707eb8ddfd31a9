"""Progress on stderr: when it is not a terminal, one line per phase as it ends, with its time
(parse, each pass, the report, each file written); none with `-q`; nothing for a phase that
failed; a live display (no lines) on a terminal."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optgraph.cli.artifacts import ARTIFACTS
from optgraph.cli.main import main
from optgraph.cli.progress import HEARTBEAT_S, PhaseProgress, progress_mode
from optgraph.passes.manager import DEFAULT_PIPELINE, parse_pipeline

REPO = Path(__file__).resolve().parents[2]
DIAMOND = str(REPO / "examples" / "diamond.ir")
LINE = re.compile(r"^optgraph: (?P<phase>.+): (?P<seconds>\d+\.\d{3}) s(?: \((?P<detail>.+)\))?$")


def _phases(err: str) -> list[str]:
    """The phase names of stderr's lines; fails on any line that is not a phase line."""
    phases = []
    for line in err.splitlines():
        match = LINE.match(line)
        assert match is not None, f"not a phase line: {line!r}"
        phases.append(match["phase"])
    return phases


def test_compile_prints_a_line_per_phase_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    report = tmp_path / "report.json"
    args = ["compile", DIAMOND, "-o", str(out_dir), "--report-json", str(report)]
    assert main(args) == 0
    captured = capsys.readouterr()
    passes = [f"pass {p.name}" for p in parse_pipeline(DEFAULT_PIPELINE)]
    written = [f"write {a.filename}" for a in ARTIFACTS]
    assert _phases(captured.err) == [
        f"parse + verify {DIAMOND}",
        *passes,
        "report",
        f"write {report}",
        *written,
    ]
    first = LINE.match(captured.err.splitlines()[0])
    assert first is not None and first["detail"] == "7 nodes"
    assert "optgraph compile: diamond" in captured.out  # results stay on stdout


def test_run_prints_its_phases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "y.npz"
    assert main(["run", DIAMOND, "--device", "cpu", "--save-outputs", str(saved)]) == 0
    assert _phases(capsys.readouterr().err) == [
        f"parse + verify {DIAMOND}",
        "compile for cpu",  # before the values: the memory check needs the planned arena
        "inputs and weights",
        "run on cpu",
        f"write {saved}",
    ]


def test_a_pass_named_twice_gets_two_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dot", DIAMOND, "-p", "dce,dce,assign-streams"]) == 0
    assert _phases(capsys.readouterr().err)[1:] == [
        "pass dce",
        "pass dce",
        "pass assign-streams",
        "draw",
    ]


@pytest.mark.parametrize("command", [["compile"], ["run", "--device", "cpu"], ["dot"]])
def test_quiet_prints_nothing(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    name, *rest = command
    assert main([name, DIAMOND, *rest, "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_an_unwritable_output_fails_before_any_phase(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["compile", DIAMOND, "-o", str(blocker)]) == 1
    *lines, last = capsys.readouterr().err.splitlines()
    assert last == f"error: cannot write outputs to '{blocker}': it is not a directory"
    assert _phases("\n".join(lines)) == []  # checked before parsing: no work was done


def test_a_bad_model_fails_before_any_phase_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.ir"
    bad.write_text("graph g {\n  input %x : f32[4]\n  %y = exp(%nope) : f32[4]\n  output %y\n}\n")
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:3:12: error: use of undefined value '%nope'")


def test_lines_reach_a_pipe_as_each_phase_ends() -> None:
    """A real process whose stderr is a pipe: the lines are there, flushed, with the error last."""
    done = subprocess.run(
        [sys.executable, "-m", "optgraph", "compile", DIAMOND, "-p", "dce,bogus-pass"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("<pipeline>:1:5: error: unknown pass 'bogus-pass'")  # no work
    done = subprocess.run(
        [sys.executable, "-m", "optgraph", "compile", DIAMOND, "-p", "dce,cse"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0
    assert _phases(done.stderr) == [f"parse + verify {DIAMOND}", "pass dce", "pass cse", "report"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_display_and_no_lines() -> None:
    terminal = _Terminal()
    assert progress_mode(terminal, quiet=False) == "live"
    assert progress_mode(terminal, quiet=True) == "quiet"
    assert progress_mode(io.StringIO(), quiet=False) == "lines"
    with PhaseProgress(terminal, "live", total=2) as progress:
        with progress.phase("parse"):
            pass
        with progress.phase("report"):
            pass
    shown = terminal.getvalue()
    assert "optgraph: parse:" not in shown
    assert "report" in shown and "2/2" in shown  # the last phase, both counted (then cleared)


def test_a_long_phase_says_it_is_still_running() -> None:
    log = io.StringIO()
    with PhaseProgress(log, "lines", heartbeat_s=0.2) as progress:
        with progress.phase("parse + verify big.ir"):
            time.sleep(0.9)
        time.sleep(0.5)  # between phases: nothing is running, nothing to say
    *beats, last = log.getvalue().splitlines()
    assert LINE.match(last) is not None and last.startswith("optgraph: parse + verify big.ir: 0.")
    assert 1 <= len(beats) <= 5
    for beat in beats:
        assert re.fullmatch(r"optgraph: parse \+ verify big\.ir: \d+ s so far", beat), beat


def _long_pipeline(count: int) -> str:
    return ",".join(["dce"] * count)


def test_a_long_pipeline_prints_a_bounded_number_of_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 36 (finding 9): 10,000 passes printed 10,000 lines (280-360 KB). Now passes share a
    line: one at every tenth of the pipeline, more only when the heartbeat finds no line for
    `HEARTBEAT_S`."""
    start = time.perf_counter()
    assert main(["compile", DIAMOND, "-p", _long_pipeline(10_000)]) == 0
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    phases = _phases(err)
    assert phases[0] == f"parse + verify {DIAMOND}" and phases[-1] == "report"
    groups = [re.fullmatch(r"passes (\d+)-(\d+) of 10,000", p) for p in phases[1:-1]]
    assert all(groups), phases
    spans = [(int(g[1]), int(g[2])) for g in groups if g]
    assert spans[0][0] == 1 and spans[-1][1] == 10_000  # every pass, once, in order
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    # one line per tenth, and one more per heartbeat of a slow run
    assert len(spans) <= 10 + int(seconds / HEARTBEAT_S) + 1, (len(spans), seconds)
    assert len(err) < 100 * (len(spans) + 2) < 4096 + 100 * seconds / HEARTBEAT_S, len(err)


def test_a_short_pipeline_keeps_a_line_per_pass(capsys: pytest.CaptureFixture[str]) -> None:
    from optgraph.cli.progress import EVERY_PASS_UP_TO

    assert main(["compile", DIAMOND, "-p", _long_pipeline(EVERY_PASS_UP_TO)]) == 0
    assert _phases(capsys.readouterr().err)[1:-1] == ["pass dce"] * EVERY_PASS_UP_TO


def test_a_long_pipeline_on_a_terminal_is_one_live_line() -> None:
    import optgraph as og
    from optgraph.passes.manager import parse_pipeline

    terminal = _Terminal()
    passes = parse_pipeline(_long_pipeline(10_000))
    with PhaseProgress(terminal, "live", total=len(passes)) as progress:
        progress.run_pipeline(og.parse_file(DIAMOND), passes)
    shown = terminal.getvalue()
    assert "optgraph: pass" not in shown and "10000/10000" in shown
    assert len(shown) < 64 * 1024  # the live line redrawn a few times a second, then cleared


def test_a_long_pipeline_of_slow_passes_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouping by time alone still gave a line per pass once each pass took a second or more
    (10,000 such passes: 10,000 lines again). Here every reading of the clock moves it two
    seconds on: the log holds one line per tenth of the pipeline, however slow the passes."""
    import optgraph as og

    ticks = itertools.count(0.0, 2.0)
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    log = io.StringIO()
    passes = parse_pipeline(_long_pipeline(10_000))
    with PhaseProgress(log, "lines", heartbeat_s=3600.0) as progress:
        progress.run_pipeline(og.parse_file(DIAMOND), passes)
    monkeypatch.undo()
    text = log.getvalue()
    spans = [re.fullmatch(r"passes (\d+)-(\d+) of 10,000", p) for p in _phases(text)]
    assert [(int(s[1]), int(s[2])) for s in spans if s] == [
        (k * 1000 + 1, (k + 1) * 1000) for k in range(10)
    ], text[:2000]
    assert len(text) < 1024, len(text)
