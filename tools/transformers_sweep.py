"""transformers architectures through `og.from_torch`, each built from a small config with random
weights, against transformers' own output: which import, and how close they come.

Each model (2 layers, hidden 32, vocab 64; images 32×32) runs eagerly in float32 on 7 tokens (or
one image); its first output (the last hidden state or the logits) is the expected value. The
export of the same call is imported, then run by the reference interpreter and by the compiled CPU
program (and, with `--cuda`, compiled for the GPU); a row gives the NMSE of each against
transformers, or the importer's refusal (its first line). Nothing needs a network: configs, not
checkpoints.

    python tools/transformers_sweep.py                 # every model, a markdown table
    python tools/transformers_sweep.py gpt2 falcon     # some of them
    python tools/transformers_sweep.py --markdown FILE # also write the table there
    python tools/transformers_sweep.py --cuda          # also compiled for cuda, on the GPU
    python tools/transformers_sweep.py --onnx          # through torch.onnx.export, og.from_onnx
    python tools/transformers_sweep.py --onnx --transformers-onnx-table  # with its ONNX functions
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKENS = (5, 9, 1, 33, 7, 2, 60)
# What a model is called on, where not 7 tokens: "image" (1×3×32×32), "features" (16 mel bins ×
# 64 frames), "wave" (400 samples), "seq2seq" (5 tokens in, 3 decoder tokens).
KINDS = {
    "vit": "image", "clip_vision": "image", "convnext": "image", "resnet": "image",
    "swin": "image", "segformer": "image", "dinov2": "image", "whisper_encoder": "features",
    "wav2vec2": "wave", "bart": "seq2seq", "t5": "seq2seq",
}  # fmt: skip
SDPA = {"llama_sdpa"}  # run with transformers' default attention (sdpa), not eager


def models() -> dict[str, Callable[[], Any]]:
    """Name -> a function building the model (transformers imported on first use)."""
    import transformers as t

    small = {
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    gqa = {**small, "num_key_value_heads": 2}
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "image_size": 32,
        "patch_size": 8,
    }
    gpt = {"vocab_size": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}
    seq2seq = {
        "vocab_size": 64, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64, "max_position_embeddings": 64,
    }  # fmt: skip

    def mixtral() -> Any:
        return t.MixtralConfig(**gqa, num_local_experts=4, num_experts_per_tok=2)

    def qwen2_moe() -> Any:
        return t.Qwen2MoeConfig(
            **gqa,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        )

    def qwen3_moe() -> Any:
        return t.Qwen3MoeConfig(
            **gqa, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32
        )

    def gpt_oss() -> Any:
        return t.GptOssConfig(**gqa, head_dim=8, num_local_experts=4, num_experts_per_tok=2)

    return {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**gqa)),
        "llama3_rope": lambda: t.LlamaForCausalLM(
            t.LlamaConfig(
                **gqa,
                rope_scaling={
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 32,
                },
            )
        ),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**gqa)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**gqa)),
        "qwen3": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(**gqa, head_dim=8)),
        "gemma": lambda: t.GemmaForCausalLM(t.GemmaConfig(**gqa, head_dim=8)),
        "gemma2": lambda: t.Gemma2ForCausalLM(t.Gemma2Config(**gqa, head_dim=8)),
        "gemma3": lambda: t.Gemma3ForCausalLM(t.Gemma3TextConfig(**gqa, head_dim=8)),
        "phi": lambda: t.PhiForCausalLM(t.PhiConfig(**small)),
        "phi3": lambda: t.Phi3ForCausalLM(t.Phi3Config(**gqa, pad_token_id=0)),
        "stablelm": lambda: t.StableLmForCausalLM(t.StableLmConfig(**gqa)),
        "starcoder2": lambda: t.Starcoder2ForCausalLM(t.Starcoder2Config(**gqa)),
        "olmo": lambda: t.OlmoForCausalLM(t.OlmoConfig(**gqa)),
        "granite": lambda: t.GraniteForCausalLM(t.GraniteConfig(**gqa)),
        "cohere": lambda: t.CohereForCausalLM(t.CohereConfig(**gqa)),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(**gpt)),
        "gptj": lambda: t.GPTJForCausalLM(t.GPTJConfig(**gpt, rotary_dim=4)),
        "codegen": lambda: t.CodeGenForCausalLM(t.CodeGenConfig(**gpt, rotary_dim=4, n_ctx=64)),
        "gpt_neox": lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**small)),
        "falcon": lambda: t.FalconForCausalLM(
            t.FalconConfig(
                vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4
            )
        ),
        "bloom": lambda: t.BloomForCausalLM(
            t.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)
        ),
        "opt": lambda: t.OPTForCausalLM(
            t.OPTConfig(
                vocab_size=64,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=64,
                max_position_embeddings=64,
                word_embed_proj_dim=32,
            )
        ),
        "mpt": lambda: t.MptForCausalLM(
            t.MptConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64)
        ),
        "mixtral": lambda: t.MixtralForCausalLM(mixtral()),
        "mixtral_batched_mm": lambda: batched_mm(t.MixtralForCausalLM(mixtral())),
        "qwen2_moe": lambda: t.Qwen2MoeForCausalLM(qwen2_moe()),
        "qwen2_moe_batched_mm": lambda: batched_mm(t.Qwen2MoeForCausalLM(qwen2_moe())),
        "qwen3_moe": lambda: t.Qwen3MoeForCausalLM(qwen3_moe()),
        "gpt_oss": lambda: t.GptOssForCausalLM(gpt_oss()),
        "gpt_oss_batched_mm": lambda: batched_mm(t.GptOssForCausalLM(gpt_oss())),
        "bert": lambda: t.BertModel(t.BertConfig(**small)),
        "roberta": lambda: t.RobertaModel(t.RobertaConfig(**small)),
        "xlm_roberta": lambda: t.XLMRobertaModel(t.XLMRobertaConfig(**small)),
        "distilbert": lambda: t.DistilBertModel(
            t.DistilBertConfig(
                vocab_size=64,
                dim=32,
                n_layers=2,
                n_heads=4,
                hidden_dim=64,
                max_position_embeddings=64,
            )
        ),
        "albert": lambda: t.AlbertModel(t.AlbertConfig(**small, embedding_size=16)),
        "electra": lambda: t.ElectraModel(t.ElectraConfig(**small, embedding_size=32)),
        "deberta_v2": lambda: t.DebertaV2Model(t.DebertaV2Config(**small)),
        "mobilebert": lambda: t.MobileBertModel(
            t.MobileBertConfig(
                **small, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16
            )
        ),
        "t5_encoder": lambda: t.T5EncoderModel(
            t.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
        ),
        "clip_text": lambda: t.CLIPTextModel(t.CLIPTextConfig(**small)),
        "vit": lambda: t.ViTModel(t.ViTConfig(**vision)),
        "clip_vision": lambda: t.CLIPVisionModel(t.CLIPVisionConfig(**vision)),
        "convnext": lambda: t.ConvNextModel(
            t.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32)
        ),
        "resnet": lambda: t.ResNetModel(
            t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
        ),
        "llama_sdpa": lambda: t.LlamaForCausalLM(t.LlamaConfig(**gqa)),
        "bart": lambda: t.BartModel(t.BartConfig(**seq2seq)),
        "t5": lambda: t.T5Model(
            t.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
        ),
        "whisper_encoder": lambda: (
            t.WhisperModel(
                t.WhisperConfig(
                    **{k: v for k, v in seq2seq.items() if k not in ("max_position_embeddings",)},
                    num_mel_bins=16,
                    max_source_positions=32,
                    max_target_positions=32,
                    pad_token_id=0,
                    bos_token_id=1,
                    eos_token_id=2,
                    decoder_start_token_id=1,
                    suppress_tokens=[],
                    begin_suppress_tokens=[],
                )
            ).encoder
        ),
        "wav2vec2": lambda: t.Wav2Vec2Model(
            t.Wav2Vec2Config(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=8,
                num_conv_pos_embedding_groups=4,
            )
        ),
        "swin": lambda: t.SwinModel(
            t.SwinConfig(
                image_size=32,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 2],
                window_size=4,
            )
        ),
        "segformer": lambda: t.SegformerModel(
            t.SegformerConfig(
                num_encoder_blocks=2,
                depths=[1, 1],
                sr_ratios=[2, 1],
                hidden_sizes=[16, 32],
                num_attention_heads=[1, 2],
                patch_sizes=[7, 3],
                strides=[4, 2],
                mlp_ratios=[2, 2],
                decoder_hidden_size=32,
            )
        ),
        "dinov2": lambda: t.Dinov2Model(
            t.Dinov2Config(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                image_size=32,
                patch_size=8,
                mlp_ratio=2,
            )
        ),
    }


def batched_mm(model: Any) -> Any:
    """`model` with transformers' `batched_mm` experts: each token's experts' weights gathered
    (`experts[ids]`) and applied as batched products. The default (`grouped_mm`) sorts the tokens
    by expert and counts them (sort, histc, index_put): shapes that depend on the routing."""
    model.config._experts_implementation = "batched_mm"
    return model


def model_inputs(kind: str) -> tuple[Any, ...]:
    """The arguments a model of `kind` (`KINDS`) is called on."""
    import torch

    if kind == "image":
        return (torch.randn(1, 3, 32, 32),)
    if kind == "features":
        return (torch.randn(1, 16, 64),)
    if kind == "wave":
        return (torch.randn(1, 400),)
    if kind == "seq2seq":
        return torch.tensor([TOKENS[:5]]), torch.tensor([TOKENS[:3]])
    return (torch.tensor([TOKENS]),)


def exported(
    wrapped: Any, args: tuple[Any, ...], onnx: bool, table: bool = False
) -> tuple[Any, Any]:
    """(graph, weights) of the model's call: through torch.export, or with `onnx` through
    `torch.onnx.export` (the dynamo exporter, in memory) and `og.from_onnx`; with `table`, the
    exporter also given transformers' own ONNX functions (what its ONNX exporter passes: the
    grouped products of MoE experts unrolled per expert, bool index_put, bincount)."""
    from optgraph.frontends.torch_export import from_torch

    if not onnx:
        return from_torch(wrapped, args)
    import contextlib
    import io

    import torch

    from optgraph.frontends.onnx import from_onnx

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            program = torch.onnx.export(
                wrapped, args, dynamo=True, custom_translation_table=transformers_table(table)
            )
    except Exception as exc:  # noqa: BLE001 - the exporter's failure, not the importer's
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # the exporter's colours
        raise NotExported(plain.splitlines()[0] if plain else type(exc).__name__) from None
    return from_onnx(program.model_proto)


def transformers_table(wanted: bool) -> dict[Any, Any] | None:
    """transformers' ONNX translation table where `wanted` (None otherwise)."""
    if not wanted:
        return None
    from transformers.exporters import exporter_onnx

    return dict(exporter_onnx._ONNX_TRANSLATION_TABLE)


class NotExported(Exception):
    """torch.onnx.export failed: there is no ONNX model to import."""


def wrapped(name: str) -> tuple[Any, tuple[Any, ...]]:
    """(a module returning model `name`'s first output, the arguments it is called on), the
    model built from its config with seeded random weights (eager attention unless in SDPA)."""
    import torch

    torch.manual_seed(0)
    model = models()[name]().eval()
    if name not in SDPA:
        model.config._attn_implementation = "eager"
    kind = KINDS.get(name, "tokens")

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs: Any) -> Any:
            if kind == "seq2seq":
                return self.model(input_ids=xs[0], decoder_input_ids=xs[1], use_cache=False)[0]
            return self.model(xs[0])[0]

    return FirstOutput(), model_inputs(kind)


def check(name: str, cuda: bool = False, onnx: bool = False, table: bool = False) -> str:
    """The table row of one model."""
    module, args = wrapped(name)
    return row(name, module, args, cuda, onnx, table)


def row(
    name: str, module: Any, args: tuple[Any, ...], cuda: bool, onnx: bool, table: bool = False
) -> str:
    """The table row of `module` called on `args` (its output a tensor): imported and run, or
    why not (`exported` says what `table` does)."""
    import numpy as np
    import torch

    import optgraph as og
    from optgraph.reference.interpreter import nmse, run_reference

    with torch.no_grad():
        want = module(*args).numpy().astype(np.float64)
    start = time.process_time()
    try:
        graph, weights = exported(module, args, onnx, table)
    except NotExported as exc:
        return f"| {name} | not exported | torch.onnx.export: {exc} | | |" + (" |" if cuda else "")
    except og.OptGraphError as exc:  # a refusal; anything else is a defect, raised
        reason = str(exc).splitlines()
        tail = [line.strip() for line in reason[1:] if re.match(r"\s*\S+ ×\d+:", line)]
        head = reason[0].split("error: ", 1)[-1].rstrip(":")
        text = head + (": " + "; ".join(tail) if tail else "")
        return f"| {name} | refused | {text} | | |" + (" |" if cuda else "")
    seconds = time.process_time() - start
    inputs = {decl.name: a.numpy() for decl, a in zip(graph.inputs, args)}
    ref = run_reference(graph, inputs, weights)[graph.output_names()[0]]
    compiled = og.compile(graph, target="cpu").run(inputs, weights)[graph.output_names()[0]]
    results = [ref, compiled]
    if cuda:
        program = og.compile(graph, target="cuda")
        results.append(program.run(inputs, weights)[graph.output_names()[0]])
    errors = " | ".join(f"{nmse(np.asarray(v, np.float64), want):.1e}" for v in results)
    ops = [n.op for n in graph.nodes]
    raised = f"{ops.count('attention')} attention, {ops.count('softmax')} softmax"
    return f"| {name} | imported | {len(ops)} nodes ({raised}), {seconds:.1f} s | {errors} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("only", nargs="*", help="models by name (default: all)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table there")
    parser.add_argument(
        "--cuda", action="store_true", help="also compile for cuda and run on the GPU"
    )
    parser.add_argument(
        "--onnx", action="store_true", help="through torch.onnx.export and og.from_onnx instead"
    )
    parser.add_argument(
        "--transformers-onnx-table",
        action="store_true",
        help="with --onnx: give the exporter transformers' own ONNX functions (its exporter's)",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    table = models()
    names = args.only or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; known: {', '.join(table)}")
    lines = [
        f"transformers {transformers.__version__}; float32; 2 layers, hidden 32; "
        + ("torch.onnx.export, og.from_onnx" if args.onnx else "torch.export, og.from_torch")
        + (" (transformers' ONNX table)" if args.onnx and args.transformers_onnx_table else ""),
        "",
        "| model | import | graph / refusal | NMSE reference | NMSE compiled (CPU) |"
        + (" NMSE compiled (cuda) |" if args.cuda else ""),
        "|---|---|---|---|---|" + ("---|" if args.cuda else ""),
    ]
    print("\n".join(lines), flush=True)
    for name in names:
        lines.append(check(name, args.cuda, args.onnx, args.transformers_onnx_table))
        print(lines[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
