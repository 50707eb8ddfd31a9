"""Where `generate` gets a model: a Hugging Face checkpoint directory, a GGUF file, or an `.ir`
decode step with its weights file, behind one interface (`ModelSource`).

    source = open_source("llama-dir")                 # or "model.gguf", or "step.ir" + weights
    source.fingerprint()                              # what its compiled programs depend on
    step = source.decode_step(context=512, dtype="f32")   # a StepGraph (frontends/step_graphs)
    prefill = source.prefill_step(16, 512, "f32")         # None for an .ir source
    source.batches("cpu")                             # whether a list of prompts runs together
    rows = source.batch_step(3, None, 512, "f32")         # 3 rows a step; None for an .ir
    weights = source.weights(step)                    # arrays by the graph's weight names
    tokenizer = source.tokenizer()                    # None where the model has none

Steps are made only on a program cache miss; a hit needs the fingerprint and the weights, so a
checkpoint source imports neither torch nor transformers then. Weights are views of the model
file where it allows (safetensors and GGUF, memory-mapped), converted where the step's dtype
differs from the stored one, each one array object for every step (so the GPU runtime uploads
it from the host once: `runtime/cuda/memory.DeviceCopies`); a checkpoint's experts stored one
tensor each are stacked once (a copy) and shared by every step.

- checkpoint: `hf_checkpoint` + `hf_steps`; default context the config's
  `max_position_embeddings` (or `n_positions`), at most 4096; default dtype f32 on the CPU, f16
  on the GPU (a GGUF file's too);
- GGUF: `step_graphs.gguf_step` (llama_ir through `og.from_gguf`), its tensors by name; default
  context `{arch}.context_length`, at most 4096;
- `.ir`: `step_graphs.ir_decode_step`; the weights file (`.npz`, `.safetensors`, `.gguf`) as
  `optgraph run --weights` reads it; context and dtype are the graph's, fixed.

Batch steps (`batch_step`: B rows in one run, `api/batch_generation.py`): llama_ir builds a
GGUF file's with positions and `kv_len` per row; a checkpoint's are transformers' forward with
a position per row, its cache written and its masks made per row (`frontends/hf_row_steps.py`).
An `.ir` step is what its file says.

Not handled: several weights files for an `.ir`, `.ir` prefill steps (the prompt is fed one token
a step), batch steps of `.ir` files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from optgraph.api.text_tokenizer import TextTokenizer, from_directory, load_tokenizer
from optgraph.errors import InputError
from optgraph.frontends.step_graphs import StepGraph, TensorMerge
from optgraph.ir.graph import TensorType
from optgraph.reference.kernels import numpy_dtype

DEFAULT_CONTEXT = 4096


class ModelSource(Protocol):
    """A model `generate` can run (module docstring)."""

    path: Path
    kind: str

    def fingerprint(self) -> str: ...

    def default_context(self) -> int: ...

    def default_dtype(self, target: str) -> str: ...

    def tokenizer(self) -> TextTokenizer | None: ...

    def decode_step(self, context: int, dtype: str) -> StepGraph: ...

    def prefill_step(self, bucket: int, context: int, dtype: str) -> StepGraph | None: ...

    def batches(self, target: str) -> bool: ...

    def batch_step(
        self, batch: int, bucket: int | None, context: int, dtype: str
    ) -> StepGraph | None: ...

    def weights(self, step: StepGraph) -> dict[str, Any]: ...


def _converted(array: np.ndarray, dtype: str) -> np.ndarray:
    want = numpy_dtype(dtype)
    return array if array.dtype == want else array.astype(want)


@dataclass
class CheckpointSource:
    """A Hugging Face checkpoint directory."""

    path: Path
    kind: str = "checkpoint"
    _checkpoint: Any = None
    _models: dict[str, Any] = field(default_factory=dict)
    # (weight, dtype) -> its merged experts: one copy shared by every step that reads it
    _merged: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    # (tensor, dtype) -> the array every step gets (converted once where the dtype differs)
    _arrays: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Any:
        if self._checkpoint is None:
            from optgraph.frontends.hf_checkpoint import open_checkpoint
            from optgraph.frontends.hf_steps import check_architecture

            self._checkpoint = open_checkpoint(self.path)
            check_architecture(self._checkpoint)
        return self._checkpoint

    def fingerprint(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        versions = []
        for package in ("torch", "transformers"):
            try:
                versions.append(f"{package} {version(package)}")
            except PackageNotFoundError:
                versions.append(f"{package} -")
        text = self.checkpoint.fingerprint() + " ".join(versions)
        return hashlib.sha256(text.encode()).hexdigest()

    def default_context(self) -> int:
        config = self.checkpoint.config
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
            value = text.get(key)
            if isinstance(value, int) and value > 0:
                return min(value, DEFAULT_CONTEXT)
        return DEFAULT_CONTEXT

    def default_dtype(self, target: str) -> str:
        if target == "cpu":
            return "f32"
        stored = str(
            self.checkpoint.config.get("torch_dtype") or self.checkpoint.config.get("dtype")
        )
        return "bf16" if stored == "bfloat16" else "f16"

    def tokenizer(self) -> TextTokenizer | None:
        if not (self.path / "tokenizer.json").is_file():
            return None
        return from_directory(self.path)

    def _model(self, dtype: str) -> Any:
        model = self._models.get(dtype)
        if model is None:
            from optgraph.frontends.hf_steps import HFModel

            model = self._models[dtype] = HFModel(self.checkpoint, dtype)
        return model

    def decode_step(self, context: int, dtype: str) -> StepGraph:
        step: StepGraph = self._model(dtype).decode_step(context)
        return step

    def prefill_step(self, bucket: int, context: int, dtype: str) -> StepGraph | None:
        step: StepGraph = self._model(dtype).prefill_step(bucket, context)
        return step

    def batches(self, target: str) -> bool:
        """For the architectures whose batch steps are checked (`hf_row_steps`)."""
        from optgraph.frontends.hf_row_steps import ROWS_ARCHITECTURES

        return self.checkpoint.config.get("model_type") in ROWS_ARCHITECTURES

    def batch_step(
        self, batch: int, bucket: int | None, context: int, dtype: str
    ) -> StepGraph | None:
        """`batch` rows through transformers' forward (`hf_row_steps`): a prefill of `bucket`
        tokens a row, or with `bucket` None a decode step, each row at its own position."""
        from optgraph.frontends.hf_row_steps import rows_decode_step, rows_prefill_step

        model = self._model(dtype)
        if bucket is None:
            return rows_decode_step(model, batch, context)
        return rows_prefill_step(model, batch, bucket, context)

    def _merged_array(self, name: str, merge: TensorMerge, typed: TensorType) -> np.ndarray:
        """Experts stored one tensor each, stacked as the graph reads them (a copy, made once)."""
        key = (name, typed.dtype)
        found = self._merged.get(key)
        if found is None:
            checkpoint = self.checkpoint
            array = merge.join([[checkpoint.array(n) for n in group] for group in merge.groups])
            if tuple(array.shape) != typed.shape:
                raise checkpoint.error(
                    f"tensors merged into '{name}' make {list(array.shape)}, the graph reads "
                    f"{typed}"
                )
            found = self._merged[key] = _converted(array, typed.dtype)
        return found

    def weights(self, step: StepGraph) -> dict[str, Any]:
        checkpoint = self.checkpoint
        out: dict[str, Any] = {}
        for weight in step.graph.weights:
            if weight.name in step.constants:
                out[weight.name] = step.constants[weight.name]
                continue
            merge = step.merged_tensors.get(weight.name)
            if merge is not None:
                out[weight.name] = self._merged_array(weight.name, merge, weight.type)
                continue
            name = step.tensor_name(weight.name)
            if name not in checkpoint.tensors:
                raise checkpoint.error(f"tensor '{name}' missing (the graph reads it)")
            found = self._arrays.get((name, weight.type.dtype))
            if found is None:
                array = checkpoint.array(name)
                if tuple(array.shape) != weight.type.shape:
                    raise checkpoint.error(
                        f"tensor '{name}' is {list(array.shape)}, the graph reads {weight.type}"
                    )
                found = self._arrays[(name, weight.type.dtype)] = _converted(
                    array, weight.type.dtype
                )
            out[weight.name] = found
        return out


@dataclass
class GGUFSource:
    """A GGUF file (llama, qwen2, qwen3, phi3, gemma2, gemma3: `frontends/gguf.py`)."""

    path: Path
    kind: str = "gguf"
    _file: Any = None
    _arrays: dict[str, np.ndarray] = field(default_factory=dict)  # by tensor name

    @property
    def file(self) -> Any:
        if self._file is None:
            from optgraph.reference.gguf_file import open_gguf

            self._file = open_gguf(self.path)
        return self._file

    def fingerprint(self) -> str:
        stat = self.path.stat()
        digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        with self.path.open("rb") as handle:  # the header: metadata and tensor table
            digest.update(handle.read(4 << 20))
        return digest.hexdigest()

    def default_context(self) -> int:
        arch = self.file.architecture
        value = self.file.metadata(f"{arch}.context_length", DEFAULT_CONTEXT)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, DEFAULT_CONTEXT)
        return DEFAULT_CONTEXT

    def default_dtype(self, target: str) -> str:
        return "f32" if target == "cpu" else "f16"

    def tokenizer(self) -> TextTokenizer | None:
        if not self.file.has("tokenizer.ggml.tokens"):
            return None
        return load_tokenizer(self.path)

    def decode_step(self, context: int, dtype: str) -> StepGraph:
        from optgraph.frontends.step_graphs import gguf_step

        return gguf_step(self.path, 1, context, dtype)

    def prefill_step(self, bucket: int, context: int, dtype: str) -> StepGraph | None:
        from optgraph.frontends.step_graphs import gguf_step

        return gguf_step(self.path, bucket, context, dtype)

    def batches(self, target: str) -> bool:
        return True

    def batch_step(
        self, batch: int, bucket: int | None, context: int, dtype: str
    ) -> StepGraph | None:
        """`batch` rows: a prefill of `bucket` tokens a row, all at positions 0.. (shared), or
        with `bucket` None a decode step of one token a row, each row at its own position."""
        from optgraph.frontends.step_graphs import gguf_step

        if bucket is None:
            return gguf_step(self.path, 1, context, dtype, batch=batch, per_row=True)
        return gguf_step(self.path, bucket, context, dtype, batch=batch)

    def weights(self, step: StepGraph) -> dict[str, Any]:
        """The step's tensors, each one array object for every step (read, and for q/k rows
        un-permuted, once): the runtime then uploads each from the host once
        (`runtime/cuda/memory.DeviceCopies`)."""
        out: dict[str, Any] = {}
        for w in step.graph.weights:
            name = step.tensor_name(w.name)
            found = self._arrays.get(name)
            if found is None:
                found = self._arrays[name] = self.file.array(name)
            out[w.name] = found
        return out


@dataclass
class IRSource:
    """An `.ir` decode step and its weights file (`--weights`)."""

    path: Path
    weights_path: Path
    tokenizer_path: Path | None = None
    kind: str = "ir"
    _step: StepGraph | None = None

    @property
    def step(self) -> StepGraph:
        if self._step is None:
            from optgraph.frontends.step_graphs import ir_decode_step
            from optgraph.ir.parser import parse_file
            from optgraph.ir.verify import verify

            graph = parse_file(str(self.path))
            verify(graph)
            self._step = ir_decode_step(graph)
        return self._step

    def fingerprint(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def _cache_type(self) -> Any:
        types = self.step.graph.value_types()
        return types[self.step.cache_inputs[0]] if self.step.cache_inputs else None

    def default_context(self) -> int:
        cache = self._cache_type()
        if cache is None:
            raise InputError(f"generate: graph '{self.path}' has no KV cache input")
        return int(cache.shape[-2])

    def default_dtype(self, target: str) -> str:
        return self.step.graph.value_types()[self.step.logits].dtype

    def tokenizer(self) -> TextTokenizer | None:
        if self.tokenizer_path is not None:
            return load_tokenizer(self.tokenizer_path)
        if self.weights_path.suffix == ".gguf":
            from optgraph.reference.gguf_file import open_gguf

            if open_gguf(self.weights_path).has("tokenizer.ggml.tokens"):
                return load_tokenizer(self.weights_path)
        return None

    def decode_step(self, context: int, dtype: str) -> StepGraph:
        if context != self.default_context():
            raise InputError(
                f"generate: the graph's caches hold {self.default_context()} positions; "
                f"--context {context} needs another graph"
            )
        return self.step

    def prefill_step(self, bucket: int, context: int, dtype: str) -> StepGraph | None:
        return None

    def batches(self, target: str) -> bool:
        return False

    def batch_step(
        self, batch: int, bucket: int | None, context: int, dtype: str
    ) -> StepGraph | None:
        return None

    def weights(self, step: StepGraph) -> dict[str, Any]:
        from optgraph.reference.interpreter import load_weights

        return load_weights(self.weights_path, step.graph)


def open_source(
    path: str | Path, weights: str | Path | None = None, tokenizer: str | Path | None = None
) -> ModelSource:
    """The model at `path` (module docstring); an `InputError` naming what is expected."""
    target = Path(path)
    if not target.exists():
        raise InputError(f"generate: '{target}' not found")
    if target.is_dir():
        from optgraph.frontends.hf_checkpoint import is_checkpoint_directory

        if not is_checkpoint_directory(target):
            raise InputError(f"generate: '{target}' is a directory without a config.json")
        if weights is not None:
            raise InputError("generate: --weights is for an .ir model; a checkpoint has its own")
        return CheckpointSource(target)
    if target.suffix == ".gguf":
        if weights is not None:
            raise InputError("generate: --weights is for an .ir model; a GGUF file has its own")
        return GGUFSource(target)
    if target.suffix == ".ir":
        if weights is None:
            raise InputError(
                f"generate: '{target}' needs --weights FILE (.npz, .safetensors, .gguf)"
            )
        if not Path(weights).is_file():
            raise InputError(f"generate: weights file '{weights}' not found")
        return IRSource(target, Path(weights), None if tokenizer is None else Path(tokenizer))
    raise InputError(
        f"generate: '{target}' is not a model generate reads: a Hugging Face checkpoint "
        "directory (config.json + .safetensors), a .gguf file, or an .ir decode step with --weights"
    )
