"""One fact, one knob: whether lowering merges launches (`--no-merge-launches`,
`LoweringOptions.merge_launches`) reaches assign-streams' cost model (`merged-launches`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.errors import PipelineError
from optgraph.passes.assign_streams import AssignStreamsPass
from optgraph.passes.manager import with_merged_launches

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "diamond.ir")


def test_the_lowering_fact_is_written_into_assign_streams() -> None:
    text = "verify,assign-streams{max-streams=2},plan-memory"
    assert with_merged_launches(text, True) == text  # nothing to change: the same text
    tied = with_merged_launches(text, False)
    assert tied == "verify,assign-streams{max-streams=2,merged-launches=false},plan-memory"
    assert with_merged_launches("default", False).count("merged-launches=false") == 1


def test_a_pipeline_that_contradicts_the_lowering_is_an_error() -> None:
    with pytest.raises(PipelineError, match="contradicts lowering that merges launches"):
        with_merged_launches("assign-streams{merged-launches=false}", True)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The `merged_launches` of every assign-streams that runs."""
    calls: list[bool] = []
    run = AssignStreamsPass.run

    def spy(self: AssignStreamsPass, graph: og.Graph) -> og.Graph:
        calls.append(self.merged_launches)
        return run(self, graph)

    monkeypatch.setattr(AssignStreamsPass, "run", spy)
    return calls


@pytest.mark.parametrize("merge", [True, False])
def test_compile_api_plans_with_the_lowering_options(seen: list[bool], merge: bool) -> None:
    og.compile(og.parse_file(EXAMPLE), options=LoweringOptions(merge_launches=merge))
    assert seen == [merge]


@pytest.mark.parametrize("command", ["compile", "run"])
def test_no_merge_launches_reaches_the_stream_cost_model(
    seen: list[bool], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--device", "cpu"] if command == "run" else []
    assert main([command, EXAMPLE, "-q", "--no-merge-launches", *extra]) == 0
    assert seen and not any(seen)
    seen.clear()
    assert main([command, EXAMPLE, "-q", *extra]) == 0
    assert seen and all(seen)
    capsys.readouterr()
