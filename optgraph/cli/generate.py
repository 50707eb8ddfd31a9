"""`optgraph generate MODEL`: a prompt in, text out, streamed as it is made.

    $ optgraph generate llama-dir --prompt "The capital of France is" --max-new-tokens 32
     Paris, ...                                       (stdout: the new text, as it comes)
    optgraph: 7 prompt tokens, 32 new: first token 0.041 s, prefill 170.7 tok/s, decode 812.3 tok/s

MODEL is a Hugging Face checkpoint directory, a `.gguf` file, or an `.ir` decode step with
`--weights` (`api/model_sources.py`). The prompt is `--prompt TEXT`, each line of
`--prompt-file F`, or `--tokens 1,2,3`. A prompt file's prompts are generated together (a GGUF
file: `GenerationModel.stream_rows`) or one after another; either way stdout holds one
block a prompt, in the file's order (its text and a new line), each streamed as it is made once
the blocks before it are printed, and each prompt's figures follow its block on stderr; with
`--chat` the text goes through the model's chat template. Sampling: greedy unless `--temperature`
is above 0 (then `--top-k`, `--top-p`, `--seed`). Loading and compiling are progress phases on
stderr (programs come from the cache, `--cache-dir`, after the first run; `--no-cache`: none);
the text streams to stdout, or the token ids where there is no tokenizer; the figures go to
stderr after each prompt and, with `--json FILE`, to FILE with the tokens and the text (written
atomically). Any bad input (a missing or partial checkpoint, an unsupported architecture, a prompt
longer than the context, a damaged file) is one message and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from optgraph.errors import InputError


def token_list(text: str) -> list[int]:
    """`--tokens 1,2,3`."""
    try:
        tokens = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token ids like 1,2,3, got '{text}'") from None
    if not tokens:
        raise argparse.ArgumentTypeError("no token ids")
    return tokens


def _prompts(args: argparse.Namespace) -> list[str | list[int]]:
    given = [args.prompt is not None, args.prompt_file is not None, args.tokens is not None]
    if sum(given) != 1:
        raise InputError("generate: give exactly one of --prompt, --prompt-file, --tokens")
    if args.tokens is not None:
        return [args.tokens]
    if args.prompt is not None:
        return [args.prompt]
    path = Path(args.prompt_file)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"generate: --prompt-file '{path}' cannot be read ({err})") from None
    prompts: list[str | list[int]] = [line for line in lines if line.strip()]
    if not prompts:
        raise InputError(f"generate: --prompt-file '{path}' has no prompt (one a line)")
    return prompts


def _pipeline(args: argparse.Namespace) -> str:
    from optgraph.passes.manager import with_vram_budget

    if args.vram_budget is None:
        return str(args.pipeline)
    return with_vram_budget(str(args.pipeline), args.vram_budget)


def _figures(stats: Any) -> str:
    return (
        f"optgraph: {stats.prompt_tokens} prompt tokens, {stats.new_tokens} new: first token "
        f"{stats.ttft_s:.3f} s, prefill {stats.prefill_tokens_per_s:.1f} tok/s, decode "
        f"{stats.decode_tokens_per_s:.1f} tok/s"
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from optgraph.api.generation import load
    from optgraph.api.sampling import Sampling
    from optgraph.cli.progress import phase_progress
    from optgraph.codegen.lowering_options import LoweringOptions
    from optgraph.output_files import check_target

    prompts = _prompts(args)
    Sampling(args.temperature, args.top_k, args.top_p, args.seed)  # bad values before the work
    if args.json is not None:
        check_target(Path(args.json), "--json: ")  # before the work, not after
    options = LoweringOptions(merge_launches=not args.no_merge_launches)
    with phase_progress(args.quiet) as progress:

        def rebuilt(path: Path, reason: str) -> None:
            if not args.quiet:
                print(f"optgraph: program cache entry {path} unusable ({reason}): rebuilding",
                      file=sys.stderr)  # fmt: skip

        with progress.phase(f"open {args.model}"):
            model = load(
                args.model, args.device, dtype=args.dtype, context=args.context,
                weights=args.weights, tokenizer=args.tokenizer, pipeline=_pipeline(args),
                options=options, cache_dir=None if args.no_cache else (args.cache_dir or True),
                on_rebuild=rebuilt,
            )  # fmt: skip
        model.progress = progress
        tokenized = [model.encode(p, args.chat) for p in prompts]
        for ids in tokenized:  # before anything is compiled
            model.check_length(len(ids), args.max_new_tokens)
        tokenized = [model.prompt_tokens(ids) for ids in tokenized]
        model.prepare_rows([len(ids) for ids in tokenized])
        model.progress = None
    try:
        results = _generate_all(model, tokenized, args)
    finally:
        model.close()
    if args.json is not None:
        from optgraph.output_files import write_atomic

        document = {"model": str(args.model), "device": model.device, "results": results}
        write_atomic(args.json, json.dumps(document, indent=2) + "\n")
    return 0


class _Block:
    """One prompt's output: its tokens, and the text not yet printed while a block before it is
    still being made."""

    def __init__(self, model: Any) -> None:
        self.tokens: list[int] = []
        self.detok = model.detokenizer()
        self.held = ""
        self.done = False

    def push(self, token: int) -> str:
        self.tokens.append(token)
        if self.detok is None:
            return f"{' ' if len(self.tokens) > 1 else ''}{token}"
        piece: str = self.detok.push(token)
        return piece

    def end(self) -> str:
        self.done = True
        return ("" if self.detok is None else self.detok.flush()) + "\n"


def _generate_all(
    model: Any, prompts: list[list[int]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Generate every prompt (`stream_rows`) and print one block a prompt, in order (module
    docstring): the first unfinished block streams, later ones are held until it ends."""
    out = sys.stdout
    stop = model.stop_tokens(not args.ignore_eos)
    blocks = [_Block(model) for _ in prompts]
    shown = 0  # the block now printed as it comes

    def write(text: str) -> None:
        if text:
            out.write(text)
            out.flush()

    rows = model.stream_rows(
        prompts, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, seed=args.seed, stop_at_eos=not args.ignore_eos,
    )  # fmt: skip
    for row, token in rows:
        block = blocks[row]
        piece = block.push(token)
        if token in stop or len(block.tokens) == args.max_new_tokens:
            piece += block.end()  # the row's last token (stream_rows gives it no more)
        if row == shown:
            write(piece)
        else:
            block.held += piece
        while shown < len(blocks) and blocks[shown].done:
            if not args.quiet:
                print(_figures(model.last_row_stats[shown]), file=sys.stderr)
            shown += 1
            if shown < len(blocks):
                write(blocks[shown].held)
                blocks[shown].held = ""
    for block in blocks[shown:]:  # none when every row ended by the rule above
        write(block.held + ("" if block.done else block.end()))
        block.held = ""
    results = []
    for ids, block, stats in zip(prompts, blocks, model.last_row_stats):
        text = None if model.tokenizer is None else model.tokenizer.decode(block.tokens)
        results.append({"prompt_ids": ids, "tokens": block.tokens, "text": text, **stats.as_dict()})
    return results
