"""A custom attention block for ``attnroof trace examples/trace/attention.py:make``: pre-norm,
a fused QKV projection, causal scaled-dot-product attention with grouped KV heads, the output
projection and the residual add."""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int = 4096, heads: int = 32, kv_heads: int = 8) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, width // heads
        self.norm = nn.RMSNorm(width)
        self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * self.d, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).split(
            [self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], -1
        )
        q = q.view(b, n, self.heads, self.d).transpose(1, 2)
        k = k.view(b, n, self.kv_heads, self.d).transpose(1, 2)
        v = v.view(b, n, self.kv_heads, self.d).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return x + self.out(y.transpose(1, 2).reshape(b, n, -1))


def make(batch: int = 1, seq: int = 4096):
    block = Block().to(torch.bfloat16)
    return block, (torch.empty(batch, seq, 4096, dtype=torch.bfloat16, device="meta"),)
