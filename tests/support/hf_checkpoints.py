"""Tiny Hugging Face checkpoints for `generate`'s tests: one per architecture `generate` supports,
written with `save_pretrained` (random weights, hidden 64, 2 layers), and a byte-level BPE
tokenizer trained here on a few sentences, saved as `tokenizer.json` with its config (and a chat
template). No hub access.

    tokenizer = train_tokenizer()                       # tokenizers.Tokenizer, ~300 tokens
    path = write_checkpoint(tmp, "mistral", tokenizer)  # config.json, model.safetensors, ...
    model = load_reference(path)                        # transformers' own model, f32, eval
    tokens = reference_tokens(model, ids, 32)           # generate(do_sample=False), no eos stop

`ARCHITECTURES` gives each one's config class and sizes: the sliding-window ones with a window of
4 (shorter than the prompts, so the window matters), Llama with llama3 rope scaling, Falcon with
multi-query attention, the mixture-of-experts ones with 4 or 8 experts, top 2 (saved, as
`save_pretrained` writes them, one tensor an expert but gpt-oss's). Norm weights are drawn around their neutral value (as `gguf_models` does)
and the weights' spread (and Gemma's embedding rows, which its sqrt(hidden) scale and tied head make
dominant) chosen so that 32 greedy tokens are not one token repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is optgraph generating text",
    "a model file in, text out, at the speed of the compiled step",
    "tokens stream to stdout as they are made",
    "compiled programs are cached on disk and loaded again",
]
SPECIALS = ["<pad>", "<s>", "</s>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] | trim }}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SIZES = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
SIZES |= {"intermediate_size": 128, "max_position_embeddings": 128}
GQA = SIZES | {"num_key_value_heads": 2}
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
GPT_OSS = {"head_dim": 16, "sliding_window": 4, "num_local_experts": 4, "num_experts_per_tok": 2}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
    "rope_theta": 10000.0,
}
# name -> (transformers config class, its arguments, initializer range, embedding factor)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any], float, float]] = {
    "llama": ("LlamaConfig", GQA, 0.2, 1.0),
    "llama3": ("LlamaConfig", GQA | {"rope_parameters": LLAMA3}, 0.2, 1.0),
    "mistral": ("MistralConfig", GQA | {"sliding_window": 4}, 0.2, 1.0),
    "qwen2": ("Qwen2Config", GQA, 0.2, 1.0),
    "qwen3": ("Qwen3Config", GQA | {"head_dim": 16}, 0.2, 1.0),
    "gemma2": ("Gemma2Config", GQA | {"head_dim": 16, "sliding_window": 4}, 0.05, 0.3),
    "gemma3": ("Gemma3TextConfig", GQA | {"head_dim": 16, "sliding_window": 4}, 0.05, 0.3),
    "phi3": ("Phi3Config", GQA, 0.2, 1.0),
    "gpt_neox": ("GPTNeoXConfig", SIZES, 0.2, 1.0),
    "olmo2": ("Olmo2Config", GQA, 0.2, 1.0),
    "stablelm": ("StableLmConfig", GQA, 0.2, 1.0),
    "falcon": (
        "FalconConfig",
        {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
        0.5,
        1.0,
    ),
    "gpt2": ("GPT2Config", {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128}, 0.5, 1.0),
    # mixture of experts: softmax top 2 renormalised (Mixtral, Qwen3-MoE) or not, with a gated
    # shared expert (Qwen2-MoE); saved one tensor an expert, as published checkpoints are
    "mixtral": ("MixtralConfig", GQA | {"num_local_experts": 4, "num_experts_per_tok": 2}, 0.2, 1),
    "qwen2_moe": ("Qwen2MoeConfig", GQA | MOE | {"shared_expert_intermediate_size": 48}, 0.2, 1),
    "qwen3_moe": ("Qwen3MoeConfig", GQA | MOE | {"head_dim": 16, "norm_topk_prob": True}, 0.2, 1),
    # experts with biases and a clamped SwiGLU, attention sinks, alternating windows of 4
    "gpt_oss": ("GptOssConfig", GQA | GPT_OSS, 0.2, 1.0),
}


def train_tokenizer(vocab_size: int = 300) -> Any:
    """A byte-level BPE tokenizer trained on `SENTENCES` (every byte is a token: any text
    encodes), with the specials `<pad>`, `<s>`, `</s>` (ids 0, 1, 2) and `<s>` prepended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return tokenizer


def save_tokenizer(tokenizer: Any, directory: Path) -> None:
    """`tokenizer.json`, `tokenizer_config.json` (specials, chat template) in `directory`."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))


def build_model(arch: str, vocab: int, seed: int = 0) -> Any:
    """transformers' model of `arch` with seeded random weights (module docstring)."""
    import transformers

    name, sizes, spread, embedding = ARCHITECTURES[arch]
    specials = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    config = getattr(transformers, name)(
        vocab_size=vocab, initializer_range=spread, **sizes, **specials
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    gemma = arch.startswith("gemma")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:  # norms away from their neutral value, biases away from 0
                is_scale = ("norm" in pname or "ln" in pname) and pname.endswith("weight")
                neutral = 1.0 if is_scale else 0.0
                p.copy_(torch.randn_like(p) * 0.2 + (0.0 if gemma else neutral))
        # tied embeddings that dominate the residual repeat one token: smaller rows do not
        model.get_input_embeddings().weight.mul_(embedding)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def write_checkpoint(directory: Path, arch: str, tokenizer: Any, seed: int = 0) -> Path:
    """`arch`'s model and `tokenizer` saved in `directory` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    model = build_model(arch, tokenizer.get_vocab_size(), seed)
    model.save_pretrained(str(directory))
    save_tokenizer(tokenizer, directory)
    return directory


def load_reference(directory: Path) -> Any:
    """transformers' own loading of the checkpoint: the oracle."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    return model.eval()


def reference_tokens(model: Any, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' greedy tokens (no end-of-sequence stop)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            do_sample=False,
            max_new_tokens=new_tokens,
            attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
            eos_token_id=None,
            pad_token_id=0,
        )
    return [int(t) for t in out[0, len(prompt) :]]


def quietly(build: Callable[[], Any]) -> Any:
    """`build()` with transformers' and torch's warnings and progress bars off."""
    import warnings

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build()
