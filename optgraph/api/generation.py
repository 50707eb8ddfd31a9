"""`og.load(path)`: a model file in, text out, on the CPU or the GPU, with compiled programs
cached on disk.

    model = og.load("llama-dir", device="cpu")       # a checkpoint dir, a .gguf, or .ir + weights
    result = model.generate("Hello", max_new_tokens=32)
    result.text, result.tokens, result.stats.decode_tokens_per_s
    for token in model.stream("Hello", max_new_tokens=32, temperature=0.8, seed=1):
        ...                                          # token ids as they are made
    results = model.generate(["Hello", "Once upon a time"])   # a list: one Generation a prompt

A model has a decode step (one token over the KV caches, updated in place) and, for checkpoints
and GGUF files, prefill steps: the prompt padded to a bucket of 16, 32, 64, ... tokens (at most
the context) in one run that fills the caches. Each step is compiled once per (model, step,
dtype, device, pipeline, lowering options, context length) and kept in the program cache
(`program_cache.py`); a second `load` of the same model reads the programs back and imports
nothing. Without a prefill step (an `.ir` decode step) the prompt is fed one token a step.

The loop: prefill (or the prompt through decode), the first token chosen from the last prompt
row's logits, then one decode step a token, each token chosen by `sampling.Sampling` (greedy by
default) until `max_new_tokens` or an end-of-sequence token (`stop_at_eos`). On the CPU the
programs run on the planned executor and tokens are chosen by `sampling.sample`; on the GPU the
loop stays on the device (`runtime/cuda/decode_loop.py`: the token chosen by a kernel and fed back
without a host round trip, copied out asynchronously).

Timing (`GenerationStats`): time to first token from the start of the prefill to the first token
on the host, prefill tokens/s (prompt tokens / that time), decode tokens/s (tokens after the
first / the time from the first token to the last).

A list of prompts: with a GGUF file, generated together in batches of up to `MAX_BATCH` rows
(`batch_generation.py`: one step for every row, each with its own length, positions and
`kv_len`; each row's tokens are those of its prompt alone; on the GPU
`runtime/cuda/rows_loop.py`); with a checkpoint directory the same (its steps:
`frontends/hf_row_steps.py`); with an `.ir` step, one after another.

Not handled: batches of `.ir` steps and of checkpoints outside `hf_row_steps.ROWS_ARCHITECTURES`
(those run one after another).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from optgraph.api.batch_generation import MAX_BATCH, rows_inputs, rows_tokens
from optgraph.api.model_sources import ModelSource, open_source
from optgraph.api.program_cache import ProgramCache, cache_key, default_cache_dir
from optgraph.api.programs import CompiledProgram, plan_graph
from optgraph.api.sampling import Sampling, sample
from optgraph.api.text_tokenizer import Detokenizer, TextTokenizer, load_tokenizer
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.lower_arena import lower
from optgraph.errors import InputError, OptGraphError
from optgraph.frontends.step_graphs import StepGraph
from optgraph.reference.kernels import numpy_dtype

FIRST_BUCKET = 16
DEVICES = ("cpu", "cuda")


@dataclass
class CompiledStep:
    """A step graph and its compiled program (what the program cache keeps)."""

    step: StepGraph
    program: CompiledProgram


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.ttft_s if self.ttft_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        after_first = self.new_tokens - 1
        return after_first / self.decode_s if after_first > 0 and self.decode_s > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "ttft_s": self.ttft_s,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
        }


@dataclass
class Generation:
    """One prompt's result: the new tokens, their text (None without a tokenizer), timing."""

    prompt_tokens: list[int]
    tokens: list[int]
    text: str | None
    stats: GenerationStats = field(default_factory=GenerationStats)


def bucket_for(length: int, context: int) -> int:
    """The prefill length a prompt of `length` tokens is padded to: 16, 32, 64, ... <= context."""
    bucket = FIRST_BUCKET
    while bucket < length:
        bucket *= 2
    return min(bucket, context)


def is_prompt_list(prompt: Any) -> bool:
    """A list of prompts (texts, or token id lists), not one prompt of token ids."""
    return (
        isinstance(prompt, list | tuple)
        and len(prompt) > 0
        and all(isinstance(p, str) or not isinstance(p, int | np.integer) for p in prompt)
    )


def cuda_usable() -> bool:
    try:
        from optgraph.runtime.cuda.runner import is_available
    except ImportError:
        return False
    return bool(is_available())


def step_inputs(step: StepGraph, tokens: Sequence[int], start: int) -> dict[str, np.ndarray]:
    """`step`'s inputs but its caches: `tokens` (padded with 0 to the step's length) at
    positions `start`, `start + 1`, ...; the logits row kept is the last real token's."""
    types = step.graph.value_types()
    seq = step.seq
    if not 0 < len(tokens) <= seq:
        raise ValueError(f"{len(tokens)} tokens for a step of {seq}")
    out: dict[str, np.ndarray] = {}
    for name, role in step.roles.items():
        if role == "cache":
            continue
        t = types[name]
        if role == "tokens":
            values = np.zeros(seq, np.int64)
            values[: len(tokens)] = tokens
        elif role in ("positions", "position_ids"):
            values = np.arange(start, start + seq)
        elif role == "cache_position":
            values = np.array([start])
        elif role == "kv_len":
            values = np.array([start + seq])
        elif role == "last":
            values = np.array([len(tokens) - 1])
        else:
            raise ValueError(f"unknown input role {role!r}")
        out[name] = values.astype(numpy_dtype(t.dtype)).reshape(t.shape)
    return out


def logits_row(step: StepGraph, logits: Any, count: int) -> np.ndarray:
    """The logits of the last of `count` real tokens of a run of `step`."""
    rows: np.ndarray = np.asarray(logits).reshape(-1, step.vocab)
    row: np.ndarray = rows[count - 1] if step.logits_rows == "all" else rows[0]
    return row


class GenerationModel:
    """A loaded model (module docstring). Make one with `load`."""

    def __init__(
        self,
        source: ModelSource,
        *,
        device: str,
        dtype: str,
        context: int,
        pipeline: str,
        options: LoweringOptions,
        cache: ProgramCache,
        tokenizer: TextTokenizer | None,
        progress: Any = None,
    ) -> None:
        self.source = source
        self.device = device
        self.dtype = dtype
        self.context = context
        self.pipeline = pipeline
        self.options = options
        self.cache = cache
        self.tokenizer = tokenizer
        self.progress = progress
        self.last_stats = GenerationStats()
        self.last_row_stats: list[GenerationStats] = []
        self._steps: dict[str, CompiledStep] = {}
        self._weights: dict[str, dict[str, Any]] = {}
        self._device_loop: Any = None
        self._rows_loops: dict[int, Any] = {}

    @property
    def decode(self) -> CompiledStep:
        """The compiled decode step (compiled, or read from the cache, on first use)."""
        return self.compiled("decode")

    # -- programs ---------------------------------------------------------------------------

    def _phase(self, name: str) -> AbstractContextManager[Any]:
        return nullcontext() if self.progress is None else self.progress.phase(name)

    def compiled(self, kind: str) -> CompiledStep:
        """The compiled step `kind` ("decode", or "prefill-N"), from the cache or built."""
        found = self._steps.get(kind)
        if found is not None:
            return found
        parts = {
            "model": self.source.fingerprint(),
            "kind": self.source.kind,
            "step": kind,
            "dtype": self.dtype,
            "target": self.device,
            "pipeline": self.pipeline,
            "options": repr(self.options),
            "context": self.context,
        }
        key = cache_key(parts)
        with self._phase(f"{kind} program"):
            compiled, _ = self.cache.load_or_build(key, lambda: self._build(kind))
        self._steps[kind] = compiled
        return compiled

    def _build(self, kind: str) -> CompiledStep:
        if kind.startswith("rows-"):  # rows-B-decode, rows-B-prefill-N
            parts = kind.split("-")
            bucket = None if parts[2] == "decode" else int(parts[3])
            rows = self.source.batch_step(int(parts[1]), bucket, self.context, self.dtype)
            if rows is None:
                raise OptGraphError(f"{self.source.path}: no batch steps")
            step = rows
        elif kind == "decode":
            step = self.source.decode_step(self.context, self.dtype)
        else:
            prefill = self.source.prefill_step(int(kind.split("-")[1]), self.context, self.dtype)
            if prefill is None:
                raise OptGraphError(f"{self.source.path}: no prefill step")
            step = prefill
        return CompiledStep(
            step, compile_step(step.graph, self.pipeline, self.device, self.options)
        )

    def prefill_for(self, length: int) -> CompiledStep | None:
        """The prefill step a prompt of `length` tokens runs through (None: fed token by token)."""
        if self.source.kind == "ir":
            return None
        return self.compiled(f"prefill-{bucket_for(length, self.context)}")

    def weights(self, compiled: CompiledStep) -> dict[str, Any]:
        key = next(k for k, v in self._steps.items() if v is compiled)
        found = self._weights.get(key)
        if found is None:
            found = self._weights[key] = self.source.weights(compiled.step)
        return found

    # -- prompts ----------------------------------------------------------------------------

    def encode(self, prompt: str | Sequence[int], chat: bool = False) -> list[int]:
        """Token ids of `prompt`: text through the tokenizer (the chat template first with
        `chat`), or ids as given. Compiles nothing."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InputError(
                    f"generate: {self.source.path} has no tokenizer; give token ids (--tokens) "
                    "or a tokenizer (--tokenizer)"
                )
            if chat:
                text = self.tokenizer.chat_prompt([{"role": "user", "content": prompt}])
                ids = self.tokenizer.encode(text, add_special_tokens=False)
            else:
                ids = self.tokenizer.encode(prompt)
        else:
            if chat:
                raise InputError("generate: --chat needs a text prompt, not token ids")
            ids = [int(t) for t in prompt]
        if not ids:
            raise InputError("generate: the prompt has no tokens")
        return ids

    def prompt_tokens(self, prompt: str | Sequence[int], chat: bool = False) -> list[int]:
        """`encode`, checked against the model's vocabulary."""
        ids = self.encode(prompt, chat)
        vocab = self.decode.step.vocab
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise InputError(f"generate: token {bad[0]} outside the vocabulary (0 to {vocab - 1})")
        return ids

    def check_length(self, prompt_length: int, max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise InputError(f"generate: --max-new-tokens must be at least 1, got {max_new_tokens}")
        if prompt_length > self.context:
            raise InputError(
                f"generate: the prompt has {prompt_length} tokens, more than the context "
                f"({self.context}); give a larger --context"
            )
        if prompt_length + max_new_tokens > self.context:
            raise InputError(
                f"generate: {prompt_length} prompt tokens + {max_new_tokens} new tokens exceed the "
                f"context ({self.context}); give fewer --max-new-tokens or a larger --context"
            )

    def prepare(self, prompt_length: int) -> None:
        """Compile (or load) what a prompt of this length needs, before generating; on the GPU
        also bind and capture its programs, so that a prompt's time is its run."""
        prefill = self.prefill_for(prompt_length)
        if self.device == "cuda":
            with self._phase("bind and capture on the GPU"):
                loop = self.device_loop()
                if prefill is not None:
                    loop.prepare(prefill, self.weights(prefill))

    def stop_tokens(self, stop_at_eos: bool = True) -> set[int]:
        """The tokens that end a prompt's generation (it ends after `max_new_tokens` too)."""
        return set(self.tokenizer.eos_ids) if stop_at_eos and self.tokenizer is not None else set()

    @property
    def batches(self) -> bool:
        """Whether a list of prompts is generated together (module docstring)."""
        return self.source.batches(self.device)

    def prepare_rows(self, lengths: Sequence[int]) -> None:
        """Compile (or load) the batch steps the prompts of these lengths, in this order, take
        (`stream_rows`), before generating."""
        for start in range(0, len(lengths), MAX_BATCH):
            chunk = lengths[start : start + MAX_BATCH]
            if len(chunk) == 1 or not self.batches:
                for length in sorted(set(chunk)):
                    self.prepare(length)
                continue
            prefill = self.compiled(
                f"rows-{len(chunk)}-prefill-{bucket_for(max(chunk), self.context)}"
            )
            decode = self.compiled(f"rows-{len(chunk)}-decode")
            if self.device == "cuda":
                with self._phase("bind and capture on the GPU"):
                    self.rows_loop(decode).prepare(prefill, self.weights(prefill))

    # -- generating -------------------------------------------------------------------------

    def stream_rows(
        self,
        prompts: Sequence[str | Sequence[int]],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        chat: bool = False,
        stop_at_eos: bool = True,
    ) -> Iterator[tuple[int, int]]:
        """(prompt index, token) for the new tokens of every prompt, generated together
        (`batches`; else one prompt after another); each prompt's tokens are those `stream`
        gives it alone. `last_row_stats`: each prompt's figures when done."""
        sampling = Sampling(temperature, top_k, top_p, seed)
        encoded = [self.encode(p, chat) for p in prompts]
        for ids in encoded:  # before anything is compiled
            self.check_length(len(ids), max_new_tokens)
        rows = [self.prompt_tokens(ids) for ids in encoded]
        stop = self.stop_tokens(stop_at_eos)
        self.last_row_stats = [GenerationStats(prompt_tokens=len(ids)) for ids in rows]
        for first in range(0, len(rows), MAX_BATCH):
            chunk = rows[first : first + MAX_BATCH]
            if not self.batches or len(chunk) == 1:
                for row, ids in enumerate(chunk, first):
                    for token in self.stream(
                        ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                        seed=seed, stop_at_eos=stop_at_eos,
                    ):  # fmt: skip
                        self.last_row_stats[row] = self.last_stats  # set by its first token
                        yield row, token
                continue
            found = self._rows(chunk, max_new_tokens, sampling, stop)
            start = time.perf_counter()
            firsts: dict[int, float] = {}
            for row, token in found:
                now = time.perf_counter()
                stats = self.last_row_stats[first + row]
                if row not in firsts:
                    firsts[row] = now
                    stats.ttft_s = now - start
                stats.new_tokens += 1
                stats.decode_s = now - firsts[row]
                yield first + row, token

    def _rows(
        self, prompts: list[list[int]], max_new: int, sampling: Sampling, stop: set[int]
    ) -> Iterator[tuple[int, int]]:
        batch = len(prompts)
        bucket = bucket_for(max(len(p) for p in prompts), self.context)
        prefill = self.compiled(f"rows-{batch}-prefill-{bucket}")
        decode = self.compiled(f"rows-{batch}-decode")
        if self.device == "cuda":
            feed = rows_inputs(prefill.step, prompts, [0] * batch)
            loop = self.rows_loop(decode)
            weights = self.weights(prefill)
            yield from loop.tokens(prompts, max_new, sampling, stop, prefill, weights, feed)
            return
        yield from rows_tokens(
            (prefill.step, prefill.program, self.weights(prefill)),
            (decode.step, decode.program, self.weights(decode)),
            prompts, max_new, sampling, stop,
        )  # fmt: skip

    def stream(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        chat: bool = False,
        stop_at_eos: bool = True,
    ) -> Iterator[int]:
        """The new tokens, each as soon as it is on the host; `last_stats` when done."""
        sampling = Sampling(temperature, top_k, top_p, seed)
        ids = self.encode(prompt, chat)
        self.check_length(len(ids), max_new_tokens)  # before anything is compiled
        ids = self.prompt_tokens(ids)
        stop = self.stop_tokens(stop_at_eos)
        stats = GenerationStats(prompt_tokens=len(ids))
        self.last_stats = stats
        start = time.perf_counter()
        first = 0.0
        run = self._device_tokens if self.device == "cuda" else self._cpu_tokens
        for token in run(ids, max_new_tokens, sampling, stop):
            now = time.perf_counter()
            if stats.new_tokens == 0:
                first = now
                stats.ttft_s = now - start
            stats.new_tokens += 1
            stats.decode_s = now - first
            yield token

    @overload
    def generate(
        self, prompt: str | Sequence[int], max_new_tokens: int = 32, **kw: Any
    ) -> Generation: ...

    @overload
    def generate(
        self, prompt: list[str] | list[list[int]], max_new_tokens: int = 32, **kw: Any
    ) -> list[Generation]: ...

    def generate(
        self,
        prompt: str | Sequence[int] | list[str] | list[list[int]],
        max_new_tokens: int = 32,
        **kw: Any,
    ) -> Generation | list[Generation]:
        """The new tokens and their text (`stream`'s options): a `Generation`, or for a list
        of prompts (texts or token id lists) a list of them, in order (`stream_rows`)."""
        if is_prompt_list(prompt):
            prompts: list[Any] = list(prompt)
            tokens_of: list[list[int]] = [[] for _ in prompts]
            for row, token in self.stream_rows(prompts, max_new_tokens, **kw):
                tokens_of[row].append(token)
            chat = bool(kw.get("chat", False))
            return [
                Generation(
                    self.encode(p, chat), tokens, self._text(tokens), self.last_row_stats[row]
                )
                for row, (p, tokens) in enumerate(zip(prompts, tokens_of))
            ]
        ids = self.encode(prompt, bool(kw.get("chat", False)))  # type: ignore[arg-type]
        tokens = list(self.stream(prompt, max_new_tokens, **kw))  # type: ignore[arg-type]
        return Generation(ids, tokens, self._text(tokens), self.last_stats)

    def _text(self, tokens: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(tokens)

    def detokenizer(self) -> Detokenizer | None:
        return None if self.tokenizer is None else Detokenizer(self.tokenizer)

    def _cpu_tokens(
        self, prompt: list[int], max_new: int, sampling: Sampling, stop: set[int]
    ) -> Iterator[int]:
        decode = self.decode
        weights = self.weights(decode)
        types = decode.step.graph.value_types()
        caches = {
            n: np.zeros(types[n].shape, numpy_dtype(types[n].dtype))
            for n in decode.step.cache_inputs
        }
        prefill = self.prefill_for(len(prompt))
        if prefill is not None:
            feed = step_inputs(prefill.step, prompt, 0)  # and empty caches where it reads them
            feed |= dict(zip(prefill.step.cache_inputs, caches.values()))
            out = prefill.program.run(feed, self.weights(prefill), seed=None)
            caches = dict(
                zip(decode.step.cache_inputs, (out[n] for n in prefill.step.cache_outputs))
            )
            row = logits_row(prefill.step, out[prefill.step.logits], len(prompt))
        else:
            for position, token in enumerate(prompt):
                row, caches = self._cpu_decode(decode, weights, caches, token, position)
        token = sample(row, sampling, 0)
        yield token
        for index in range(1, max_new):
            if token in stop:
                return
            position = len(prompt) + index - 1
            row, caches = self._cpu_decode(decode, weights, caches, token, position)
            token = sample(row, sampling, index)
            yield token

    @staticmethod
    def _cpu_decode(
        decode: CompiledStep,
        weights: Mapping[str, Any],
        caches: dict[str, np.ndarray],
        token: int,
        position: int,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        feed = {**step_inputs(decode.step, [token], position), **caches}
        out = decode.program.run(feed, weights, seed=None)
        step = decode.step
        caches = {n: out[o] for n, o in zip(step.cache_inputs, step.cache_outputs)}
        return logits_row(step, out[step.logits], 1), caches

    def _device_tokens(
        self, prompt: list[int], max_new: int, sampling: Sampling, stop: set[int]
    ) -> Iterator[int]:
        loop = self.device_loop()
        prefill = self.prefill_for(len(prompt))
        if prefill is not None:
            weights = self.weights(prefill)
            feeds = [step_inputs(prefill.step, prompt, 0)]
        else:
            weights = None
            feeds = [step_inputs(self.decode.step, [t], i) for i, t in enumerate(prompt)]
        yield from loop.tokens(len(prompt), max_new, sampling, stop, prefill, weights, feeds)

    def device_loop(self) -> Any:
        """The GPU decode loop (`runtime/cuda/decode_loop.py`), made on first use."""
        if self._device_loop is None:
            from optgraph.runtime.cuda.decode_loop import DeviceDecodeLoop

            self._device_loop = DeviceDecodeLoop(self.decode, self.weights(self.decode))
        return self._device_loop

    def rows_loop(self, decode: CompiledStep) -> Any:
        """The GPU loop of a batch decode step (`runtime/cuda/rows_loop.py`), made on first
        use, one a batch size."""
        found = self._rows_loops.get(decode.step.batch)
        if found is None:
            from optgraph.runtime.cuda.rows_loop import DeviceRowsLoop

            found = DeviceRowsLoop(decode, self.weights(decode))
            self._rows_loops[decode.step.batch] = found
        return found

    def close(self) -> None:
        if self._device_loop is not None:
            self._device_loop.close()
            self._device_loop = None
        for loop in self._rows_loops.values():
            loop.close()
        self._rows_loops.clear()
        for compiled in self._steps.values():
            compiled.program.close()


def compile_step(
    graph: Any, pipeline: str, target: str, options: LoweringOptions
) -> CompiledProgram:
    """`og.compile` without starting a runtime: what the program cache stores (the CUDA runtime
    starts on the first run or bind)."""
    from optgraph.passes.manager import with_merged_launches

    pipeline = with_merged_launches(pipeline, options.merge_launches)
    planned = plan_graph(graph, pipeline)
    lowered = None
    if target == "cuda":
        from optgraph.codegen.lower_cuda import lower_for_cuda

        lowered = lower_for_cuda(planned, options)
    return CompiledProgram(
        planned, lower(planned), target, source=graph, pipeline=pipeline, options=options,
        lowered=lowered,
    )  # fmt: skip


def load(
    path: str | Path,
    device: str | None = None,
    *,
    dtype: str | None = None,
    context: int | None = None,
    weights: str | Path | None = None,
    tokenizer: str | Path | None = None,
    pipeline: str = "default",
    options: LoweringOptions | None = None,
    cache_dir: str | Path | None | bool = True,
    progress: Any = None,
    on_rebuild: Callable[[Path, str], None] | None = None,
) -> GenerationModel:
    """A model ready to generate (module docstring). `device` None: cuda when a GPU is usable,
    else cpu. `cache_dir`: True for the default (`~/.cache/optgraph/programs`), a folder, or
    False/None for no cache. `progress`: an object whose `phase(name)` is a context manager
    (`cli.progress.PhaseProgress`)."""
    device = device or ("cuda" if cuda_usable() else "cpu")
    if device not in DEVICES:
        raise InputError(f"generate: device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not cuda_usable():
        raise InputError("generate --device cuda: no usable CUDA GPU (CuPy missing or no device)")
    source = open_source(path, weights, tokenizer)
    context = context or source.default_context()
    if context < 1:
        raise InputError(f"generate: --context must be positive, got {context}")
    dtype = dtype or source.default_dtype(device)
    if dtype not in ("f32", "f16", "bf16"):
        raise InputError(f"generate: dtype must be f32, f16 or bf16, got {dtype!r}")
    if device == "cuda" and dtype == "bf16":
        raise InputError(
            "generate --device cuda: bf16 is not supported on the GPU (the decode loop binds "
            "CuPy arrays, which have no bfloat16 dtype); use --dtype f16 or f32"
        )
    directory = default_cache_dir() if cache_dir is True else (cache_dir or None)
    cache = ProgramCache(directory, on_rebuild)
    text = load_tokenizer(tokenizer) if tokenizer is not None else source.tokenizer()
    return GenerationModel(
        source, device=device, dtype=dtype, context=context, pipeline=pipeline,
        options=options or LoweringOptions(), cache=cache, tokenizer=text, progress=progress,
    )  # fmt: skip
