"""A DiT block (Peebles & Xie, "Scalable Diffusion Models with Transformers", 2023) for
``attnroof trace examples/trace/dit.py:make``: DiT-XL/2's width 1152, 16 heads, MLP ratio 4, on
the 256 patch tokens of a 256×256 image (a 32×32 latent in patches of 2), with adaLN-Zero: the
conditioning vector c regresses shift, scale and gate for both branches (6 × 1152)."""

import torch
import torch.nn.functional as F
from torch import nn


class DiTBlock(nn.Module):
    def __init__(self, width: int = 1152, heads: int = 16, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(width, mlp_ratio * width)
        self.fc2 = nn.Linear(mlp_ratio * width, width)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN_modulation(c).unsqueeze(1).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + gate1 * self.proj(y.transpose(1, 2).reshape(b, n, w))
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


def make(batch: int = 8, seq: int = 256):
    block = DiTBlock().to(torch.bfloat16)
    x = torch.empty(batch, seq, 1152, dtype=torch.bfloat16, device="meta")
    c = torch.empty(batch, 1152, dtype=torch.bfloat16, device="meta")
    return block, (x, c)
