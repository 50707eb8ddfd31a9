"""Small PyTorch models with random weights, written like the real ones they stand for."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ManualRMSNorm(nn.Module):
    """The Llama/Hugging Face spelling: x · rsqrt(mean(x²) + eps) · w."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    """One pre-norm decoder layer: RMSNorm, rope, grouped-query SDPA, SwiGLU MLP."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 128,
                 theta: float = 10000.0) -> None:  # fmt: skip
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm = ManualRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = ManualRMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim
        self.register_buffer("inv_freq", 1.0 / theta**exponent, persistent=False)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, s, _ = hidden_states.shape
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, S, D]
        h = self.input_layernorm(hidden_states)
        q = self.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        hidden_states = hidden_states + self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.post_attention_layernorm(hidden_states)
        mlp = self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
        return hidden_states + mlp


class GPT2Block(nn.Module):
    """LayerNorm, fused qkv projection with bias, causal SDPA, tanh-GELU MLP (written out)."""

    def __init__(self, hidden: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    @staticmethod
    def new_gelu(x: torch.Tensor) -> torch.Tensor:
        inner = (2.0 / torch.pi) ** 0.5 * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (t.view(b, s, self.heads, c // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, s, c))
        return x + self.mlp_proj(self.new_gelu(self.c_fc(self.ln_2(x))))


class SmallCNN(nn.Module):
    """conv-BN-ReLU, max pool, a grouped conv, global average pool, a classifier with softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)
        for bn in (self.bn1, self.bn2):  # non-trivial running statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(image))), 2)
        h = F.relu(self.bn2(self.conv2(h)))
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.fc(h).softmax(-1)


class ErfGelu(nn.Module):
    """An MLP whose GELU is spelled with erf, as BERT-era code does."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return h * 0.5 * (1.0 + torch.erf(h / 1.4142135623730951))


class NotGelu(nn.Module):
    """Looks like the erf GELU but uses a different constant: must not be raised."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / 1.3))


class Unmappable(nn.Module):
    """Two ops optgraph has no IR for (flip, argsort), three nodes in all."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x, [0]) + torch.flip(x, [1]) + torch.argsort(x, 1).float()


class DecodeStep(nn.Module):
    """One decode step over a static KV cache passed in and returned (Hugging Face's StaticCache
    writes with index_copy_ the same way): project, write the new row, attend over the cache."""

    def __init__(self, hidden: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                cache_position: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        b = x.shape[0]
        q, k, v = (
            t.view(b, 1, self.heads, self.head_dim).transpose(1, 2)
            for t in self.qkv(x).split(x.shape[-1], dim=-1)
        )
        k_cache = k_cache.index_copy(2, cache_position, k)
        v_cache = v_cache.index_copy(2, cache_position, v)
        out = F.scaled_dot_product_attention(q, k_cache, v_cache)
        return out.transpose(1, 2).reshape(b, 1, -1), k_cache, v_cache
