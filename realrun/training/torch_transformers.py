"""GPT-2 in PyTorch, array for array the zoo's (Hugging Face ``GPT2LMHeadModel``), for real
training on CPU or GPU.

The module tree repeats Hugging Face's names, so ``named_parameters()`` lists exactly the zoo's
arrays in the zoo's order: ``transformer.wte``/``wpe``, each block's ``ln_1``, ``attn.c_attn``,
``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj`` (``Conv1D``: weights stored (in, out)),
then ``transformer.ln_f``; the LM head is tied to ``wte`` (no array of its own). Written here
rather than taken from ``transformers`` so the realrun extra does not pull that package in;
the block is GPT-2's: pre-norm, causal attention, GELU (tanh form, GPT-2's ``gelu_new``).
Dropout is left out (HF's is 0.1): training is then deterministic, which is what lets a
distributed run be checked against a single-process one; it owns no parameter and costs no
communication.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simscale.zoo.architectures.transformer import GPT2Config


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 linear layer: ``x @ weight + bias`` with weight (in, out)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: Tensor) -> Tensor:
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1]
        )


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(d, 4 * d)
        self.c_proj = Conv1D(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """One GPT-2 block: the unit FSDP wraps (its transformer auto-wrap policy)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Body(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.d_model)
        self.wpe = nn.Embedding(c.positions, c.d_model)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList(Block(c.d_model, c.heads) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.d_model)


class GPT2LMHead(nn.Module):
    """GPT2LMHeadModel: token ids (batch, seq) in, next-token logits (batch, seq, vocab) out."""

    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.config = c
        self.transformer = GPT2Body(c)

    def forward(self, ids: Tensor) -> Tensor:
        t = self.transformer
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = t.wte(ids) + t.wpe(positions)
        for block in t.h:
            x = block(x)
        return F.linear(t.ln_f(x), t.wte.weight)  # the head tied to the token embedding


def token_batch(
    c: GPT2Config, batch: int, seq_len: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Synthetic token ids and next-token labels, both (batch, seq_len), uniform over the
    vocabulary (the throughput does not depend on the text)."""
    if not 1 <= seq_len <= c.positions:
        raise ValueError(f"seq_len {seq_len} out of range, expected 1..{c.positions}")
    ids = torch.randint(0, c.vocab, (batch, seq_len + 1), generator=generator)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean next-token cross-entropy over every token of the batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
