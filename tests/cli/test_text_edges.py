"""Command line and text at their edges (issue 13, class 6): byte order marks, CR-only line ends,
huge tokens in messages, negative seeds, pipeline errors with a caret, unwritable `-o` found first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.errors import LONG_WORD, OptGraphError
from optgraph.passes.manager import parse_pipeline

MODEL = """graph g {
  input %x : f32[4]  # a comment
  %y = relu(%x) : f32[4]
  output %y
}
"""


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "model.ir"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + MODEL.encode(),
        MODEL.replace("\n", "\r").encode(),
        MODEL.replace("\n", "\r\n").encode(),
        b"\xef\xbb\xbf" + MODEL.replace("\n", "\r").encode(),
    ],
    ids=["bom", "cr", "crlf", "bom-cr"],
)
def test_bom_and_line_ends_parse_like_plain_text(tmp_path: Path, data: bytes) -> None:
    assert og.parse_file(_write(tmp_path, data)) == og.parse(MODEL)


def test_cr_only_lines_keep_their_numbers_in_errors(tmp_path: Path) -> None:
    text = MODEL.replace("relu(%x)", "relu(%z)").replace("\n", "\r")
    with pytest.raises(OptGraphError) as info:
        og.verify(og.parse_file(_write(tmp_path, text.encode())))
    assert info.value.span is not None
    assert (info.value.span.line, info.value.span.col) == (3, 13)


@pytest.mark.parametrize(
    "text",
    [
        MODEL.replace("relu(%x)", "relu(%" + "a" * 1_000_000 + ")"),
        MODEL.replace("relu(%x)", "r" * 1_000_000 + "(%x)"),
        MODEL.replace("output %y", "9" * 1_000_000),
        MODEL.replace("f32[4]  #", "f" * 1_000_000 + "[4]  #"),
    ],
    ids=["undefined-value", "unknown-op", "unexpected-token", "unknown-dtype"],
)
def test_messages_never_echo_a_huge_token_whole(text: str) -> None:
    with pytest.raises(OptGraphError) as info:
        og.verify(og.parse(text))
    rendered = str(info.value)
    assert len(rendered) < 1000
    assert "..." in info.value.message
    assert max(len(word) for word in info.value.message.split()) <= LONG_WORD


def test_negative_seed_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, MODEL.encode())
    with pytest.raises(SystemExit) as info:
        main(["run", str(path), "--device", "cpu", "--seed", "-5"])
    assert info.value.code == 2
    assert "--seed: must not be negative, got -5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pipeline", "col", "caret", "message"),
    [
        ("dce,fuze", 5, "^~~~", "unknown pass 'fuze'"),
        ("dce, assign-streams{max-stream=2}", 6, "^" + "~" * 27, "unknown option 'max-stream'"),
        ("dce,cse,,fuse", 9, "^~~~~", "cannot read the pipeline at ',fuse'"),
        ("dce{x}", 1, "^~~~~~", "option 'x' needs a value"),
    ],
)
def test_pipeline_errors_carry_a_column_and_caret(
    pipeline: str, col: int, caret: str, message: str
) -> None:
    with pytest.raises(OptGraphError) as info:
        parse_pipeline(pipeline)
    span = info.value.span
    assert span is not None and (span.path, span.line, span.col) == ("<pipeline>", 1, col)
    lines = str(info.value).splitlines()
    assert message in lines[0]
    assert lines[1].endswith(f"| {pipeline}")
    assert lines[2].endswith("| " + " " * (col - 1) + caret)


def test_unwritable_output_fails_before_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, MODEL.encode())
    assert main(["compile", str(path), "-o", "/dev/null/x"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "cannot create output directory '/dev/null/x'" in err
    assert main(["compile", str(path), "--report-json", str(tmp_path / "no" / "r.json")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "does not exist" in err
