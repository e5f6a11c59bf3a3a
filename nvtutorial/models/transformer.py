"""A small decoder-only transformer and its synthetic token data: what notebook 08 trains on every rung.

Plain PyTorch, written so that every parallel strategy of the ladder can wrap it unchanged:

- the attention projections ``wq``, ``wk``, ``wv``, ``wo`` are separate ``nn.Linear`` layers, so a
  column-wise split gives each rank whole heads of q, k and v with no layout to arrange (a fused QKV
  matrix split the same way needs its rows laid out per rank, head by head, as Megatron-LM does), and
  the number of heads a rank holds is read from the tensor's width, so a tensor-parallel shard of the
  projections runs the same ``forward`` with half of the heads;
- the blocks sit in ``model.blocks``, so FSDP2 can shard them one by one;
- ``model.checkpoint_activations = True`` recomputes each block's activations in the backward pass
  (``torch.utils.checkpoint``) instead of keeping them.

:func:`build` makes the same weights from the same seed in every process (on the same kind of device),
before any sharding: the single-process reference and every rung start from identical parameters.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from nvtutorial.chapters.ch08_ladder.schema import ModelConfig

Config = ModelConfig
"""The model's shape: notebook 08's torch-free ``ModelConfig`` (its schema declares the sizes once)."""


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1: as many heads as this rank's q, k, v hold (all of them, or a tensor-parallel share)
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and an untied output head."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.checkpoint_activations = False

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            if self.checkpoint_activations:
                x = checkpoint(block, x, use_reentrant=False)  # keep only x; recompute the rest in backward
            else:
                x = block(x)
        return self.head(self.norm(x))


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """Normal(0, ``std``) for every matrix and embedding, ones and zeros for the norms."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build(cfg: Config, seed: int = 0, device: str | torch.device = "cpu") -> Transformer:
    """The model with weights drawn from ``seed``, made directly on ``device``: the same numbers in
    every process that uses the same kind of device. On ``"meta"`` it holds no memory and no values
    (shard it, then ``to_empty`` and :func:`init_weights`)."""
    device = torch.device(device)
    with device:
        model = Transformer(cfg)
    if device.type != "meta":
        torch.manual_seed(seed)
        init_weights(model)
    return model


def loss_fn(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, averaged over every position of the batch."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def batch(step: int, global_batch: int, cfg: Config, seed: int = 0) -> torch.Tensor:
    """The whole global batch of step ``step``: ``global_batch`` sequences of ``seq_len + 1`` tokens.

    Each sequence counts up from a random start with a random stride (mod ``vocab``): learnable
    in context, so the loss falls. The same numbers in every process (drawn on the CPU).
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    start = torch.randint(0, cfg.vocab, (global_batch, 1), generator=g)
    stride = torch.randint(1, 8, (global_batch, 1), generator=g)
    return (start + stride * torch.arange(cfg.seq_len + 1)) % cfg.vocab


def parameter_shapes(cfg: Config) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every parameter, in ``named_parameters()`` order (built on the meta
    device: no memory, no CUDA; once per config: a build takes a fraction of a second, and notebook 10's
    questions and answers ask for the same few dozens of times)."""
    return list(_parameter_shapes(cfg))


@functools.lru_cache(maxsize=64)
def _parameter_shapes(cfg: Config) -> tuple[tuple[str, tuple[int, ...]], ...]:
    with torch.device("meta"):
        model = Transformer(cfg)
    return tuple((name, tuple(p.shape)) for name, p in model.named_parameters())
