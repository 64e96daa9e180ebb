"""`gemmlab bench --suite training`: whole models' training steps through
``gemmlab.torch`` beside plain PyTorch, in the same run.

Eight models written with ``torch.nn`` at published sizes (CONFIGS, :func:`build`):
a Llama-3.2-1B-sized decoder (GQA, tied 128256-word head), a Qwen2-0.5B-sized one
(GQA of 7 query heads per key/value head, biases on q, k and v only, tied
151936-word head), GPT-2 small (tied 50257-word head), BERT-base with a
masked-LM head, BERT-large's sizes built from ``nn.TransformerEncoderLayer``,
ViT-B/16 at 224 x 224, Swin-T's first stage (attention within 7 x 7 windows of
patches: batches of 49 x 49 products), and a Granite-3.0-1B-A400M-sized mixture
of experts (32 experts of which each token takes 8, a loop of products whose rows
change with every batch, tied 49155-word head), last so that a spent time budget
drops it first, and before it the same model with its experts as two
``torch._grouped_mm`` calls (``granite-moe-1b-grouped``: gemmlab's grouped rung
through ``use_gemmlab()``, PyTorch's own grouped kernel without).
Attention is written as ``q @ k.transpose(-1, -2)``, softmax, ``@ v`` (but in
PyTorch's own layers, which attend by SDPA), and the patch embedding as a linear
layer, so that every product is a matmul the routing contexts see.  Training is
AdamW on random data (cross entropy).

Each model runs in each mode of MODES (eager, torch.compile, and
torch.compile(mode="reduce-overhead"), CUDA graphs) in each setup of SETUPS
(the looped mixture of experts eager only: its experts' sizes change at every step,
which torch.compile would compile again for; the grouped one in the bfloat16 setups
only, torch._grouped_mm's dtype):

- bf16 (weights, gradients and optimizer state in bfloat16), PyTorch's matmul
  and inside ``gemmlab.torch.use_gemmlab(torch.bfloat16)``;
- float32 with PyTorch's SGEMM (TF32 off), with TF32 on, and inside
  ``gemmlab.torch.fp32_tc()``.

The setups of one storage dtype are built together from the same initial
weights and timed in rounds, the order rotating from round to round, so that a
GPU's clock drift favours none of them.  Reported: ms per training step (the
median), tokens or images per second, and the setup beside its PyTorch
baseline (BASELINE).

Accuracy: each setup also runs a short schedule in eager mode (DRIFT_STEPS
steps of a small batch, fixed seed, the same initial weights) beside the same
schedule in float64; the record has the largest relative difference of the
loss over the steps and the weights' difference from float64's at the end,
relative to how far float64's weights moved (``weight_drift``) and to their
norm (``weight_rel``).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import asdict, dataclass, replace

from .models import _names as _comma_list
from .report import _fmt, _pyplot, read_models_file, savefig
from .suites import _progress


@dataclass(frozen=True)
class Config:
    """A transformer's sizes.  ``kind``: decoder (next-token loss, causal),
    encoder (masked-LM loss over every position) or vision (class of the image)."""

    name: str
    kind: str
    source: str
    d: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 0  # decoder, encoder
    seq: int = 0  # tokens per sequence (vision: patches + the class token)
    batch: int = 1  # the timed runs' batch
    gated: bool = False  # SwiGLU MLP (gate and up projections, SiLU) instead of GELU
    rms: bool = False  # RMSNorm without bias instead of LayerNorm
    bias: bool = True  # biases on the linear layers
    qkv_bias: bool = False  # biases on the query, key and value projections only (Qwen2)
    rope: bool = False  # rotary positions instead of learned ones
    pre_norm: bool = True  # BERT normalises after each residual sum
    image: int = 0  # vision: image side, patch side, classes
    patch: int = 0
    classes: int = 0
    window: int = 0  # vision: attention within window x window patches (Swin), no class token
    torch_layers: bool = False  # encoder: blocks of torch.nn.TransformerEncoderLayer (attention by SDPA)
    drift_batch: int = 2  # the float64 comparison's schedule
    drift_seq: int = 128
    experts: int = 0  # a mixture of this many SwiGLU experts of ffn each instead of the MLP
    top_k: int = 0  # experts per token
    grouped: bool = False  # the experts as two torch._grouped_mm calls rather than a loop of F.linear

    @property
    def head_dim(self) -> int:
        return self.d // self.heads

    @property
    def items(self) -> str:
        return "images" if self.kind == "vision" else "tokens"

    def items_per_step(self, batch: int | None = None) -> int:
        batch = batch or self.batch
        return batch if self.kind == "vision" else batch * self.seq


CONFIGS = {
    c.name: c
    for c in (
        Config(
            "llama-1b",
            "decoder",
            "meta-llama/Llama-3.2-1B config.json",
            d=2048,
            layers=16,
            heads=32,
            kv_heads=8,
            ffn=8192,
            vocab=128256,
            seq=1024,
            batch=2,
            gated=True,
            rms=True,
            bias=False,
            rope=True,
            drift_batch=1,
        ),
        Config(
            "qwen2-0.5b",
            "decoder",
            "Qwen/Qwen2-0.5B config.json",
            d=896,
            layers=24,
            heads=14,
            kv_heads=2,
            ffn=4864,
            vocab=151936,
            seq=1024,
            batch=4,
            gated=True,
            rms=True,
            bias=False,
            qkv_bias=True,
            rope=True,
            drift_batch=1,
        ),
        Config(
            "gpt2",
            "decoder",
            "openai-community/gpt2 config.json (GPT-2 small)",
            d=768,
            layers=12,
            heads=12,
            kv_heads=12,
            ffn=3072,
            vocab=50257,
            seq=1024,
            batch=4,
        ),
        Config(
            "bert-base",
            "encoder",
            "google-bert/bert-base-uncased config.json",
            d=768,
            layers=12,
            heads=12,
            kv_heads=12,
            ffn=3072,
            vocab=30522,
            seq=512,
            batch=8,
            pre_norm=False,
        ),
        # BERT-large's sizes with PyTorch's own encoder layers (nn.TransformerEncoderLayer:
        # packed q/k/v projection, attention by F.scaled_dot_product_attention, which no routing
        # context sees): model code other than this suite's.
        Config(
            "bert-large-torch",
            "encoder",
            "google-bert/bert-large-uncased config.json, its blocks torch.nn.TransformerEncoderLayer",
            d=1024,
            layers=24,
            heads=16,
            kv_heads=16,
            ffn=4096,
            vocab=30522,
            seq=512,
            batch=4,
            pre_norm=False,
            torch_layers=True,
        ),
        Config(
            "vit-b16",
            "vision",
            "google/vit-base-patch16-224 (ViT-B/16, Dosovitskiy et al. 2021)",
            d=768,
            layers=12,
            heads=12,
            kv_heads=12,
            ffn=3072,
            seq=197,
            batch=64,
            image=224,
            patch=16,
            classes=1000,
            drift_batch=4,
        ),
        # Swin-T's first stage at 224 x 224: 56 x 56 patches of 4 x 4, d = 96, 3 heads of 32, attention
        # within 7 x 7 windows (64 an image), its two blocks; the windows neither shift nor merge
        # (a stage, not the whole Swin-T) and positions are learned, not relative.  Attention is
        # thousands of 49 x 49 products; the linear layers have 96-384 features over 10^5 rows.
        Config(
            "swin-t-stage1",
            "vision",
            "microsoft/swin-tiny-patch4-window7-224 config.json (its first stage)",
            d=96,
            layers=2,
            heads=3,
            kv_heads=3,
            ffn=384,
            seq=(224 // 4) ** 2,
            batch=64,
            image=224,
            patch=4,
            classes=1000,
            window=7,
            drift_batch=2,
        ),
        Config(
            "granite-moe-1b",
            "decoder",
            "ibm-granite/granite-3.0-1b-a400m-base config.json",
            d=1024,
            layers=24,
            heads=16,
            kv_heads=8,
            ffn=512,
            vocab=49155,
            seq=1024,
            batch=4,
            gated=True,
            rms=True,
            bias=False,
            rope=True,
            experts=32,
            top_k=8,
            drift_batch=1,
        ),
    )
}
# The same mixture of experts written with grouped products: every expert's gate and up
# projection in one torch._grouped_mm over the tokens sorted by expert, the down projection in
# another (offsets from the router's counts, on the GPU), as MoE implementations that use
# torch._grouped_mm do.  Its shapes do not change from step to step (only the offsets do), so it
# runs compiled too; bfloat16 only (torch._grouped_mm's dtype).  Before the loop variant, which
# a spent time budget then drops first.
CONFIGS = {
    **{k: v for k, v in CONFIGS.items() if k != "granite-moe-1b"},
    "granite-moe-1b-grouped": replace(CONFIGS["granite-moe-1b"], name="granite-moe-1b-grouped", grouped=True),
    "granite-moe-1b": CONFIGS["granite-moe-1b"],
}
# Each expert's rows padded to a multiple of this (8 bfloat16 rows: 16 bytes) in the grouped
# variant, as torchtitan pads them (TOKEN_GROUP_ALIGN_SIZE_M): some versions of
# torch._grouped_mm's CUDA kernel assert that a group's extent along the grouped dimension is a
# multiple of 16 bytes.  The padding rows are zeros; at most experts * 7 rows more.
GROUP_ALIGN_ROWS = 8
# The published parameter counts of these configurations (tied heads counted once;
# BERT with its masked-LM head and no pooler, ViT with its 1000-class head).
PUBLISHED_PARAMS = {
    "llama-1b": 1_235_814_400,
    "qwen2-0.5b": 494_032_768,
    "gpt2": 124_439_808,
    "bert-base": 109_514_298,
    "vit-b16": 86_567_656,
}
# Published only rounded (the model card's and the Hub's count, in billions).
PUBLISHED_BILLIONS = {"granite-moe-1b": 1.33, "granite-moe-1b-grouped": 1.33}
# Models whose sizes (not a published count) are checked: a part of a published model, or one
# written with other layers.
PUBLISHED_SIZES_ONLY = ("swin-t-stage1", "bert-large-torch")
BERT_POSITIONS, BERT_TYPES = 512, 2
MODEL_KINDS = ("decoder", "encoder", "vision")  # Config.kind: the modules build() makes
MODES = ("eager", "compile", "reduce-overhead")
# setup: (storage dtype, routing, TF32 allowed); routing None is plain PyTorch.
SETUPS = {
    "bf16": ("bfloat16", None, False),
    "bf16_gemmlab": ("bfloat16", "use_gemmlab", False),
    "fp32": ("float32", None, False),
    "tf32": ("float32", None, True),
    "fp32_tc": ("float32", "fp32_tc", False),
}
PRECISIONS = {"bf16": ("bf16", "bf16_gemmlab"), "fp32": ("fp32",), "tf32": ("tf32",), "fp32_tc": ("fp32_tc",)}
# Each setup beside the PyTorch setup it replaces (fp32_tc beside SGEMM; TF32 shown beside it too).
BASELINE = {"bf16_gemmlab": "bf16", "fp32_tc": "fp32", "tf32": "fp32"}
QUICK_SETUPS = ("bf16", "bf16_gemmlab", "fp32", "tf32", "fp32_tc")
QUICK_COMPILED = ("vit-b16", "compile", ("bf16", "bf16_gemmlab"))
WARMUP_STEPS = 3  # untimed (compilation, CUDA graph warm-up and capture, cuBLAS and gemmlab set-up)
STEPS = 9  # timed steps per run, in ROUNDS rounds
ROUNDS = 3
DRIFT_STEPS = 4
LR = 1e-4
TIME_BUDGET_S = 900.0
DEVICE = "cuda"  # where the models run (the CPU tests set "cpu")


# -- the models --------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _modules():
    """The nn.Module classes (defined on first use: the module imports without PyTorch)."""
    global _MODULES
    if "_MODULES" in globals():
        return _MODULES
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    def norm(cfg):
        return nn.RMSNorm(cfg.d, eps=1e-5) if cfg.rms else nn.LayerNorm(cfg.d, eps=1e-5)

    class Attention(nn.Module):
        """Multi-head attention with grouped key/value heads, written out:
        ``q @ k.transpose(-1, -2)``, softmax, ``@ v`` (matrix products the routing sees)."""

        def __init__(self, cfg: Config, causal: bool):
            super().__init__()
            self.cfg, self.causal = cfg, causal
            hd = cfg.head_dim
            self.qkv = nn.Linear(cfg.d, (cfg.heads + 2 * cfg.kv_heads) * hd, bias=cfg.bias or cfg.qkv_bias)
            self.o = nn.Linear(cfg.heads * hd, cfg.d, bias=cfg.bias)

        def forward(self, x, rope=None):
            cfg, (B, S, _) = self.cfg, x.shape
            hd, h, kv = cfg.head_dim, cfg.heads, cfg.kv_heads
            q, k, v = self.qkv(x).view(B, S, h + 2 * kv, hd).transpose(1, 2).split((h, kv, kv), dim=1)
            if rope is not None:
                q, k = _rotate(q, *rope), _rotate(k, *rope)
            if kv != h:  # each key/value head serves h / kv query heads
                k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
            scores = (q @ k.transpose(-1, -2)) * hd**-0.5
            if self.causal:
                mask = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            out = scores.softmax(-1) @ v
            return self.o(out.transpose(1, 2).reshape(B, S, h * hd))

    class MLP(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            self.gated = cfg.gated
            self.up = nn.Linear(cfg.d, (2 if cfg.gated else 1) * cfg.ffn, bias=cfg.bias)  # gate and up together
            self.down = nn.Linear(cfg.ffn, cfg.d, bias=cfg.bias)

        def forward(self, x):
            if self.gated:
                gate, up = self.up(x).chunk(2, dim=-1)
                return self.down(F.silu(gate) * up)
            return self.down(F.gelu(self.up(x)))

    class Experts(nn.Module):
        """A mixture of experts (Granite-3.0-MoE's): a router picks each token's top_k of
        the experts, weighted by the softmax of those experts' router logits; each expert, a
        SwiGLU MLP, runs on the tokens that chose it -- as many rows as that is, which
        changes with every batch -- in a loop of F.linear, as many MoE layers are written."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.top_k, self.grouped = cfg.top_k, cfg.grouped
            self.router = nn.Linear(cfg.d, cfg.experts, bias=False)
            self.up = nn.Parameter(torch.empty(cfg.experts, 2 * cfg.ffn, cfg.d))  # gate and up together
            self.down = nn.Parameter(torch.empty(cfg.experts, cfg.d, cfg.ffn))

        def forward(self, x):
            if self.grouped:
                return self.forward_grouped(x)
            flat = x.reshape(-1, x.shape[-1])
            weights, chosen = self.router(flat).topk(self.top_k, dim=-1)
            weights, chosen = weights.softmax(-1).flatten(), chosen.flatten()
            order = chosen.argsort()  # the (token, choice) pairs, expert by expert
            counts = torch.bincount(chosen, minlength=self.up.shape[0]).tolist()
            out, start = torch.zeros_like(flat), 0
            for e, n in enumerate(counts):
                pairs = order[start : start + n]
                start += n
                if n == 0:
                    continue
                tokens = pairs // self.top_k
                gate, up = F.linear(flat[tokens], self.up[e]).chunk(2, dim=-1)
                y = F.linear(F.silu(gate) * up, self.down[e])
                out.index_add_(0, tokens, y * weights[pairs, None].to(y.dtype))
            return out.view(x.shape)

        def forward_grouped(self, x):
            """The same mixture with two grouped products and no host sync: the (token,
            choice) pairs sorted by expert, each expert's rows padded to GROUP_ALIGN_ROWS
            (zero rows) in a buffer of fixed size (pairs + experts * (GROUP_ALIGN_ROWS - 1)
            rows), offs the padded groups' cumulative ends; rows past the last group are
            computed by nothing and read by nothing."""
            flat = x.reshape(-1, x.shape[-1])
            E, k, align = self.up.shape[0], self.top_k, GROUP_ALIGN_ROWS
            weights, chosen = self.router(flat).topk(k, dim=-1)
            weights, chosen = weights.softmax(-1).flatten(), chosen.flatten()
            order = chosen.argsort(stable=True)  # the (token, choice) pairs, expert by expert
            counts = torch.zeros(E, dtype=torch.int64, device=flat.device).scatter_add_(
                0, chosen, torch.ones_like(chosen)
            )
            padded = (counts + align - 1) // align * align
            ends = padded.cumsum(0)
            expert = chosen[order]
            rank = torch.arange(order.numel(), device=flat.device) - (counts.cumsum(0) - counts)[expert]
            rows = (ends - padded)[expert] + rank  # each pair's row in the padded buffer
            tokens = order // k
            buffer = flat.new_zeros(order.numel() + E * (align - 1), flat.shape[1])
            xs, offs = buffer.index_copy(0, rows, flat[tokens]), ends.to(torch.int32)
            gate, up = _grouped_products(xs, self.up.transpose(-2, -1), offs).chunk(2, dim=-1)
            y = _grouped_products(F.silu(gate) * up, self.down.transpose(-2, -1), offs)[rows]
            out = torch.zeros_like(flat).index_add_(0, tokens, y * weights[order, None].to(y.dtype))
            return out.view(x.shape)

    class Block(nn.Module):
        def __init__(self, cfg: Config, causal: bool):
            super().__init__()
            self.pre = cfg.pre_norm
            mlp = Experts(cfg) if cfg.experts else MLP(cfg)
            self.norm1, self.attn, self.norm2, self.mlp = norm(cfg), Attention(cfg, causal), norm(cfg), mlp

        def forward(self, x, rope=None):
            if self.pre:
                x = x + self.attn(self.norm1(x), rope)
                return x + self.mlp(self.norm2(x))
            x = self.norm1(x + self.attn(x, rope))
            return self.norm2(x + self.mlp(x))

    class Decoder(nn.Module):
        """GPT-2 (learned positions, LayerNorm, GELU) or Llama (rotary
        positions, RMSNorm, SwiGLU, GQA; Qwen2 is Llama's with biases on q, k and v,
        its rotary base aside, which changes no product); the head tied to the embedding."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.cfg = cfg
            self.embed = nn.Embedding(cfg.vocab, cfg.d)
            self.pos = None if cfg.rope else nn.Embedding(cfg.seq, cfg.d)
            self.blocks = nn.ModuleList(Block(cfg, causal=True) for _ in range(cfg.layers))
            self.norm = norm(cfg)
            self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, tokens):
            S = tokens.shape[1]
            x = self.embed(tokens)
            rope = None
            if self.pos is not None:
                x = x + self.pos.weight[:S]
            else:
                rope = _rope_tables(S, self.cfg.head_dim, x)
            for block in self.blocks:
                x = block(x, rope)
            return self.head(self.norm(x))

    class Encoder(nn.Module):
        """BERT: word, position and token-type embeddings, post-norm blocks, the
        masked-LM head (dense, GELU, LayerNorm, the decoder tied to the embedding)."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.d)
            self.pos, self.types = nn.Embedding(BERT_POSITIONS, cfg.d), nn.Embedding(BERT_TYPES, cfg.d)
            self.embed_norm = nn.LayerNorm(cfg.d, eps=1e-12)
            if cfg.torch_layers:  # PyTorch's own layers: its attention (packed projections, SDPA)
                kw = dict(dropout=0.0, activation="gelu", layer_norm_eps=1e-12, norm_first=cfg.pre_norm)
                layer = nn.TransformerEncoderLayer(cfg.d, cfg.heads, cfg.ffn, batch_first=True, **kw)
                self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False).layers
            else:
                self.blocks = nn.ModuleList(Block(cfg, causal=False) for _ in range(cfg.layers))
            self.transform, self.head_norm = nn.Linear(cfg.d, cfg.d), nn.LayerNorm(cfg.d, eps=1e-12)
            self.head = nn.Linear(cfg.d, cfg.vocab)
            self.head.weight = self.embed.weight

        def forward(self, tokens):
            S = tokens.shape[1]
            x = self.embed_norm(self.embed(tokens) + self.pos.weight[:S] + self.types.weight[0])
            for block in self.blocks:
                x = block(x)
            return self.head(self.head_norm(F.gelu(self.transform(x))))

    class Vision(nn.Module):
        """ViT: 16 x 16 patches through a linear layer (a stride-16 convolution's
        weights), a class token, learned positions, pre-norm blocks, the class head.
        With a window (Swin's stage): no class token, each block's attention within
        window x window patches (the windows a batch of sequences), the head on the
        patches' mean."""

        def __init__(self, cfg: Config):
            super().__init__()
            self.cfg = cfg
            self.patch = nn.Linear(3 * cfg.patch**2, cfg.d)
            self.cls = None if cfg.window else nn.Parameter(torch.zeros(1, 1, cfg.d))
            self.pos = nn.Parameter(torch.zeros(1, (cfg.image // cfg.patch) ** 2 + (0 if cfg.window else 1), cfg.d))
            self.blocks = nn.ModuleList(Block(cfg, causal=False) for _ in range(cfg.layers))
            self.norm, self.head = norm(cfg), nn.Linear(cfg.d, cfg.classes)

        def forward(self, images):
            B, p, w = images.shape[0], self.cfg.patch, self.cfg.window
            n = self.cfg.image // p
            patches = images.reshape(B, 3, n, p, n, p).permute(0, 2, 4, 1, 3, 5).reshape(B, n * n, 3 * p * p)
            if not w:
                x = torch.cat([self.cls.expand(B, -1, -1), self.patch(patches)], dim=1) + self.pos
                for block in self.blocks:
                    x = block(x)
                return self.head(self.norm(x[:, 0]))
            d, m = self.cfg.d, n // w  # m x m windows of w x w patches
            x = (self.patch(patches) + self.pos).view(B, m, w, m, w, d).transpose(2, 3).reshape(B * m * m, w * w, d)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x.reshape(B, n * n, d).mean(1)))

    _MODULES = {"decoder": Decoder, "encoder": Encoder, "vision": Vision}
    return _MODULES


def _grouped_products(x, w, offs):
    """torch._grouped_mm(x, w, offs=offs): row group g of x times w[g].  float64 (the accuracy
    check's reference), which torch._grouped_mm does not take, as a loop over the groups
    (reading offs on the host); rows past the last group zeros there."""
    torch = _torch()
    if x.dtype != torch.float64:
        return torch._grouped_mm(x, w, offs=offs)
    out, start = x.new_zeros(x.shape[0], w.shape[-1]), 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ w[g]
        start = end
    return out


def _rope_tables(S: int, hd: int, like):
    """cos and sin of the rotary angles (base 500000, as Llama 3), in ``like``'s dtype."""
    torch = _torch()
    inv = 500000.0 ** (-torch.arange(0, hd, 2, device=like.device, dtype=torch.float64) / hd)
    angles = torch.arange(S, device=like.device, dtype=torch.float64)[:, None] * inv[None, :]
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def _rotate(x, cos, sin):
    """Rotate each pair (first half, second half) of the head dims by the position's angle."""
    torch = _torch()
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def build(cfg: Config):
    """The model of ``cfg`` (on the current default device, float32), its
    weights drawn from the global generator: N(0, 0.02) for linear and
    embedding weights, zero biases, norms at one."""
    torch = _torch()
    model = _modules()[cfg.kind](cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 or name.endswith(("cls", "pos")):
                p.normal_(0.0, 0.02)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    return model


def parameter_count(cfg: Config) -> int:
    """The parameters :func:`build` makes for ``cfg``, counted from the sizes
    (a tied head once)."""
    d, hd = cfg.d, cfg.head_dim
    b = 1 if cfg.bias else 0
    bq = 1 if cfg.bias or cfg.qkv_bias else 0
    norm = d if cfg.rms else 2 * d
    qkv = d * (cfg.heads + 2 * cfg.kv_heads) * hd + bq * (cfg.heads + 2 * cfg.kv_heads) * hd
    attn = qkv + cfg.heads * hd * d + b * d
    up = (2 if cfg.gated else 1) * cfg.ffn
    mlp = d * up + b * up + cfg.ffn * d + b * d
    if cfg.experts:  # the router, and each expert's MLP (no biases)
        mlp = d * cfg.experts + cfg.experts * (d * up + cfg.ffn * d)
    blocks = cfg.layers * (attn + mlp + 2 * norm)
    if cfg.kind == "decoder":
        return cfg.vocab * d + (0 if cfg.rope else cfg.seq * d) + blocks + norm
    if cfg.kind == "encoder":
        embed = (cfg.vocab + BERT_POSITIONS + BERT_TYPES) * d + 2 * d
        return embed + blocks + (d * d + d) + 2 * d + cfg.vocab
    patches = (cfg.image // cfg.patch) ** 2
    cls = 0 if cfg.window else d  # the class token and its position
    return 3 * cfg.patch**2 * d + d + cls + patches * d + cls + blocks + norm + d * cfg.classes + cfg.classes


def configure(cfg: Config, *, batch: int | None = None, num_layers: int | None = None) -> Config:
    """``cfg`` with another batch or number of layers."""
    for option, n in (("--batch", batch), ("--num-layers", num_layers)):
        if n is not None and n < 1:
            raise ValueError(f"{option} {n}: give 1 or more")
    return replace(cfg, batch=batch or cfg.batch, layers=num_layers or cfg.layers)


def load_configs(path) -> dict:
    """The models of a JSON file (``gemmlab bench --suite training --config-file``): a list of
    objects with Config's fields -- ``name``, ``kind`` (decoder, encoder or vision), ``d``,
    ``layers``, ``heads``, ``ffn``, and as the kind needs ``vocab`` and ``seq`` (decoder,
    encoder) or ``image``, ``patch`` and ``classes`` (vision); the rest as Config's defaults
    (``kv_heads``: ``heads``).  Refused, naming the model and the field, where a field is
    unknown, missing or not of its kind, or the sizes do not fit together."""
    from dataclasses import fields as dc_fields

    where, data = f"--config-file {path}", read_models_file(path, "--config-file")
    types = {f.name: f.type for f in dc_fields(Config)}
    out = {}
    for i, m in enumerate(data):
        at = f"{where}, model {i}"
        if not isinstance(m, dict):
            raise ValueError(f"{at}: give an object")
        name = m.get("name")
        if not isinstance(name, str) or not name or name in CONFIGS or name in out:
            why = "is one of the suite's own" if name in CONFIGS or name in out else "give a new name (a string)"
            raise ValueError(f"{at}: name {name!r}: {why}")
        at = f"{where}, model {name!r}"
        unknown = set(m) - set(types)
        if unknown:
            raise ValueError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
        kind = m.get("kind")
        if kind not in MODEL_KINDS:
            raise ValueError(f"{at}: kind {kind!r}: give one of {', '.join(MODEL_KINDS)}")
        need = ["d", "layers", "heads", "ffn"] + (
            ["image", "patch", "classes"] if kind == "vision" else ["vocab", "seq"]
        )
        for key in need:
            if key not in m:
                raise ValueError(f"{at}: give {key}")
        for key, value in m.items():
            want = types.get(key, "int")
            if want in ("int", int) and (type(value) is not int or value < 0):
                raise ValueError(f"{at}: {key}: give a whole number, 0 or more")
            if want in ("bool", bool) and type(value) is not bool:
                raise ValueError(f"{at}: {key}: give true or false")
            if want in ("str", str) and not isinstance(value, str):
                raise ValueError(f"{at}: {key}: give a string")
        cfg = Config(**{"source": str(path), "kv_heads": m["heads"], **m})
        if kind == "vision":
            cfg = replace(cfg, seq=(cfg.image // max(cfg.patch, 1)) ** 2 + (0 if cfg.window else 1))
        elif "drift_seq" not in m:  # the float64 schedule's sequences fit the model's positions
            cfg = replace(cfg, drift_seq=min(cfg.drift_seq, cfg.seq))
        _check_sizes(cfg, at)
        out[name] = cfg
    return out


def _check_sizes(cfg: Config, at: str) -> None:
    """A ValueError naming what does not fit in ``cfg``'s sizes."""
    if min(cfg.d, cfg.layers, cfg.heads, cfg.kv_heads, cfg.ffn) < 1:
        raise ValueError(f"{at}: d, layers, heads, kv_heads and ffn are 1 or more")
    rules = [
        (cfg.d % cfg.heads == 0, f"d ({cfg.d}) is a multiple of heads ({cfg.heads})"),
        (cfg.heads % cfg.kv_heads == 0, f"heads ({cfg.heads}) is a multiple of kv_heads ({cfg.kv_heads})"),
        (not cfg.rope or cfg.head_dim % 2 == 0, "rotary positions need an even head dim"),
        (cfg.kind == "vision" or (cfg.vocab > 0 and cfg.seq > 0), "vocab and seq are 1 or more"),
        (cfg.kind != "encoder" or cfg.seq <= BERT_POSITIONS, f"an encoder's seq is at most {BERT_POSITIONS}"),
        (cfg.kind != "vision" or cfg.patch > 0 and cfg.image % cfg.patch == 0, "image is a multiple of patch"),
        (cfg.kind != "vision" or cfg.classes > 0, "classes is 1 or more"),
        (
            not cfg.window or cfg.kind == "vision" and cfg.patch > 0 and (cfg.image // cfg.patch) % cfg.window == 0,
            "a window divides the patches along a side (vision only)",
        ),
        (not cfg.torch_layers or cfg.kind == "encoder", "torch_layers: encoders only"),
        (
            not cfg.experts or cfg.kind == "decoder" and 0 < cfg.top_k <= cfg.experts,
            "experts: decoders, 0 < top_k <= experts",
        ),
        (cfg.batch > 0 and cfg.drift_batch > 0, "batch and drift_batch are 1 or more"),
        (cfg.kind == "vision" or 0 < cfg.drift_seq <= cfg.seq, "drift_seq is 1 to seq"),
    ]
    for ok, rule in rules:
        if not ok:
            raise ValueError(f"{at}: {rule}")


def make_batch(cfg: Config, batch: int, seq: int, device, generator):
    """(inputs, targets) of random data: token ids (decoders get seq + 1 to shift),
    or images and class labels."""
    torch = _torch()
    if cfg.kind == "vision":
        images = torch.randn(batch, 3, cfg.image, cfg.image, device=device, generator=generator)
        return images, torch.randint(cfg.classes, (batch,), device=device, generator=generator)
    tokens = torch.randint(cfg.vocab, (batch, seq + 1), device=device, generator=generator)
    if cfg.kind == "decoder":
        return tokens[:, :-1], tokens[:, 1:]
    return tokens[:, :-1], torch.randint(cfg.vocab, (batch, seq), device=device, generator=generator)


def loss_of(model, inputs, targets):
    """Cross entropy of the logits (in float32 at least) against the targets."""
    torch = _torch()
    logits = model(inputs)
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def routing(setup: str):
    """The context a setup's steps run in: gemmlab.torch's mode (or none) and
    PyTorch's TF32 flag for float32 matmuls."""
    from .suites import torch_tf32

    _, route, tf32 = SETUPS[setup]
    stack = contextlib.ExitStack()
    stack.enter_context(torch_tf32(tf32))
    if route is not None:
        import gemmlab.torch as gt

        torch = _torch()
        stack.enter_context(gt.fp32_tc() if route == "fp32_tc" else gt.use_gemmlab((torch.bfloat16,)))
    return stack


def train_step(model, opt, inputs, targets, setup: str):
    """One AdamW step inside the setup's context; the loss (a tensor)."""
    opt.zero_grad(set_to_none=True)
    with routing(setup):
        loss = loss_of(model, inputs, targets)
        loss.backward()
    opt.step()
    return loss.detach()


# -- selection ---------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    model: str
    mode: str
    setups: tuple


def _names(text, known, option) -> list[str]:
    """All of ``known`` (no option given), or the models suite's reading of the comma list."""
    return list(known) if text is None else _comma_list(text, known, option)


def select(*, quick: bool = False, models=None, modes=None, precisions=None, configs=None) -> list[Run]:
    """The runs, eager first (a spent time budget drops compiled runs first):
    each model in each mode with the setups of ``precisions``, or with ``quick``
    the headline (QUICK_SETUPS eager, and QUICK_COMPILED).  ``configs``: the models to
    choose from (load_configs), where not the suite's."""
    configs = configs or CONFIGS
    names = _names(models, configs, "--models")
    if quick:
        if modes is not None or precisions is not None:
            raise ValueError("--quick chooses the modes and precisions; give --models only")
        runs = [Run(m, "eager", model_setups(m, QUICK_SETUPS, configs)) for m in names]
        runs = [r for r in runs if r.setups]
        model, mode, setups = QUICK_COMPILED
        return runs + ([Run(model, mode, setups)] if model in names and configs is CONFIGS else [])
    setups = setups_of(precisions)
    return [
        Run(m, mode, model_setups(m, setups, configs))
        for mode in _names(modes, MODES, "--modes")
        for m in names
        # a loop of experts' sizes changes every step: eager only (the grouped one compiles)
        if (mode == "eager" or not configs[m].experts or configs[m].grouped) and model_setups(m, setups, configs)
    ]


def setups_of(precisions) -> tuple:
    """The setups of ``precisions`` (--precisions' comma list; None: all), each with the
    PyTorch setup it is shown beside (BASELINE), in SETUPS' order."""
    chosen = [s for p in _names(precisions, PRECISIONS, "--precisions") for s in PRECISIONS[p]]
    for setup, base in BASELINE.items():
        if setup in chosen and base not in chosen:
            chosen.append(base)
    return tuple(s for s in SETUPS if s in chosen)


def model_setups(model: str, setups, configs=None) -> tuple:
    """The setups of ``setups`` that ``model`` runs: a grouped mixture of experts the bfloat16
    ones only (torch._grouped_mm multiplies bfloat16; gemmlab's grouped rung float16 and
    bfloat16), every other model all of them."""
    if not (configs or CONFIGS)[model].grouped:
        return tuple(setups)
    return tuple(s for s in setups if SETUPS[s][0] == "bfloat16")


# -- the run -----------------------------------------------------------------------


@dataclass
class TrainRecord:
    gpu: str
    model: str
    mode: str
    setup: str
    dtype: str
    routing: str | None
    tf32: bool
    layers: int
    batch: int
    seq: int
    params: int
    items: str  # tokens or images
    ms: float | None  # median ms per step
    ms_all: list
    items_per_s: float | None
    baseline: str | None  # the setup it replaces (BASELINE)
    vs_baseline: float | None  # the baseline's ms / this setup's ms
    vs_tf32: float | None  # fp32_tc: its ms / TF32's ms
    warmup_s: float | None  # the untimed steps (compilation, capture)
    loss: float | None  # the last timed step's loss
    loss_drift: float | None = None  # eager: max over the schedule of |loss - loss64| / |loss64|
    weight_drift: float | None = None  # ||W - W64|| / ||W64 - W0|| at the schedule's end
    weight_rel: float | None = None  # ||W - W64|| / ||W64||
    failed: str | None = None
    skipped: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _sync_time(fn) -> tuple[float, object]:
    """(seconds, fn's result) of ``fn`` run from an idle GPU to an idle GPU."""
    torch = _torch()
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - start, out


class _Instance:
    """One setup's model, optimizer and compiled forward, from the shared initial weights."""

    def __init__(self, cfg: Config, setup: str, mode: str, init_state, dtype=None):
        torch = _torch()
        self.setup, self.mode = setup, mode
        dtype = dtype or getattr(torch, SETUPS[setup][0])
        with torch.device(DEVICE):
            self.model = build(cfg).to(dtype)
        self.model.load_state_dict(init_state)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=0.0)
        self.forward = (
            self.model
            if mode == "eager"
            else torch.compile(self.model, mode="reduce-overhead" if mode == "reduce-overhead" else None)
        )

    def step(self, inputs, targets):
        torch = _torch()
        if self.mode == "reduce-overhead":  # a new step: the last replay's outputs are done with
            torch.compiler.cudagraph_mark_step_begin()
        return train_step(self.forward, self.opt, inputs, targets, self.setup)


def matmul_products(cfg: Config, batch: int | None = None) -> list[tuple[int, int, int, str, int, int]]:
    """(M, N, K, ops, batch, count) of every product of a training step of ``cfg`` as
    gemmlab.torch's operators see them, with how many times a step makes it: each forward
    product, then the two its gradient makes (grad @ op(B)^T and op(A)^T @ grad, transposed
    views read in place); attention's operands taken as contiguous.  A layer's products
    count once a layer, the head's (and a vision model's patches and classes) once; equal
    shapes are one entry.  The first layer's input gradient is counted, though PyTorch skips
    it where the input needs no gradient."""
    batch = batch or cfg.batch
    hd, h, kv = cfg.head_dim, cfg.heads, cfg.kv_heads
    rows = batch * cfg.seq
    # a mixture of experts: the router, and each expert on its share of the tokens (on average);
    # grouped experts are torch._grouped_mm calls, not matmuls
    mlp_rows = rows * cfg.top_k // cfg.experts if cfg.experts else rows
    mlp = [(mlp_rows, cfg.d, (2 if cfg.gated else 1) * cfg.ffn), (mlp_rows, cfg.ffn, cfg.d)]
    # (rows, fan_in, fan_out, per layer): each expert of a layer runs its products once
    layer = cfg.layers * (cfg.experts or 1)
    linear = (
        [(rows, cfg.d, (h + 2 * kv) * hd, cfg.layers), (rows, h * hd, cfg.d, cfg.layers)]
        + ([] if cfg.grouped else [(*shape, layer) for shape in mlp])
        + ([(rows, cfg.d, cfg.experts, cfg.layers)] if cfg.experts else [])
    )
    if cfg.kind == "decoder":
        linear.append((rows, cfg.d, cfg.vocab, 1))
    elif cfg.kind == "encoder":
        linear += [(rows, cfg.d, cfg.d, 1), (rows, cfg.d, cfg.vocab, 1)]
    else:
        patch_rows = batch * (cfg.seq if cfg.window else cfg.seq - 1)  # no class token among windows
        linear += [(patch_rows, 3 * cfg.patch**2, cfg.d, 1), (batch, cfg.d, cfg.classes, 1)]
    forward = [(m, fan_out, fan_in, "NT", 1, n) for m, fan_in, fan_out, n in linear]
    # attention's sequences: each matrix of the batch, or each window of each; PyTorch's own
    # layers attend by SDPA, no matmul
    seq = cfg.window**2 if cfg.window else cfg.seq
    attention = batch * h * (cfg.seq // seq)
    forward += (
        []
        if cfg.torch_layers
        else [(seq, seq, hd, "NT", attention, cfg.layers), (seq, hd, seq, "NN", attention, cfg.layers)]
    )
    flip = {"N": "T", "T": "N"}
    counts: dict[tuple, int] = {}
    for M, N, K, ops, b, n in forward:
        for shape in ((M, N, K, ops, b), (M, K, N, "N" + flip[ops[1]], b), (K, N, M, flip[ops[0]] + "N", b)):
            counts[shape] = counts.get(shape, 0) + n
    return [(*shape, n) for shape, n in counts.items()]


def matmul_shapes(cfg: Config, batch: int | None = None) -> list[tuple[int, int, int, str, int]]:
    """(M, N, K, ops, batch) of every product of a training step of ``cfg`` (matmul_products,
    without the counts)."""
    return [p[:5] for p in matmul_products(cfg, batch)]


def _precompile(cfg: Config, setups, say) -> None:
    """Compile, in parallel processes, the kernels the routed setups' products
    plan (else each compiles on first use, one at a time, inside the warm-up)."""
    from . import models
    from ...runtime.device import gpu_info

    dtypes = [{"bf16_gemmlab": "bf16", "fp32_tc": "fp32_tc"}[s] for s in setups if SETUPS[s][1]]
    if not dtypes:
        return
    cases = [models.Case("matmul", "", M, b, M, N, K, ops, "", ()) for M, N, K, ops, b in matmul_shapes(cfg)]
    try:
        models._precompile([(c, d) for c in cases for d in dtypes], gpu_info(0), say)
    except Exception as exc:  # noqa: BLE001 - only a head start: the steps compile what they need
        say(f"  precompiling: {type(exc).__name__}: {exc}".splitlines()[0])


def _empty_cache() -> None:
    if DEVICE == "cuda":
        _torch().cuda.empty_cache()


def _gpu_name() -> str:
    from ...runtime.device import gpu_info

    return gpu_info(0).name  # without a GPU: gemmlab's NoGPUError, one line


def run(
    runs: list[Run],
    *,
    steps: int | None = None,
    batch: int | None = None,
    num_layers: int | None = None,
    seed: int = 0,
    time_budget_s: float = TIME_BUDGET_S,
    quiet: bool = False,
    configs=None,
) -> dict:
    """Each run's setups timed in alternating rounds, then (eager runs) the
    float64 comparison; {"gpu", "records", "configs"} (``configs``: the runs' models,
    where not the suite's: load_configs)."""
    gpu = _gpu_name()
    torch = _torch()
    steps = STEPS if steps is None else steps
    if steps < 1:
        raise ValueError(f"--steps {steps}: give 1 or more")
    configs = configs or CONFIGS
    cfgs = {r.model: configure(configs[r.model], batch=batch, num_layers=num_layers) for r in runs}
    start, records = time.time(), []

    def say(msg):
        _progress(f"[{time.time() - start:5.0f} s] {msg}", quiet)

    say(f"{len(runs)} runs: " + "; ".join(f"{r.model} {r.mode} ({', '.join(r.setups)})" for r in runs))
    for i, r in enumerate(runs):
        cfg = cfgs[r.model]
        if i and time.time() - start > time_budget_s:  # the first run always runs
            say(f"{r.model} {r.mode}: skipped, the time budget ({time_budget_s:.0f} s) is spent")
            records += [_record(gpu, cfg, r.mode, s, skipped="time budget spent") for s in r.setups]
            continue
        say(
            f"run {i + 1}/{len(runs)}: {r.model} ({parameter_count(cfg) / 1e6:.0f}M parameters, batch "
            f"{cfg.batch}), {r.mode}: {', '.join(r.setups)}"
        )
        if DEVICE == "cuda":
            _precompile(cfg, r.setups, lambda msg: say(f"  {msg}"))
        torch.manual_seed(seed)
        with torch.device(DEVICE):
            init = {k: v.detach().clone() for k, v in build(cfg).state_dict().items()}
        mine = _time_run(cfg, r, init, steps, seed, gpu, say)
        if r.mode == "eager":
            _drift(cfg, r.setups, init, seed, mine, say)
        else:  # free the compiled graphs (and CUDA graph pools) before the next run
            torch._dynamo.reset()
        records += [mine[s] for s in r.setups]
        del init
        _empty_cache()
    dicts = [rec.as_dict() for rec in records]
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "records": dicts,
        "configs": {name: asdict(cfg) | {"params": parameter_count(cfg)} for name, cfg in cfgs.items()},
    }


def _record(gpu, cfg, mode, setup, **kw) -> TrainRecord:
    storage, route, tf32 = SETUPS[setup]
    fields = (
        dict(
            ms=None,
            ms_all=[],
            items_per_s=None,
            baseline=BASELINE.get(setup),
            vs_baseline=None,
            vs_tf32=None,
            warmup_s=None,
            loss=None,
        )
        | kw
    )
    return TrainRecord(
        gpu,
        cfg.name,
        mode,
        setup,
        storage,
        route,
        tf32,
        cfg.layers,
        cfg.batch,
        cfg.seq,
        parameter_count(cfg),
        cfg.items,
        **fields,
    )


def _why(exc: BaseException) -> str:
    """An exception in one line: its type and first line, and the line after where the first
    only introduces it (torch.compile's "backend='inductor' raised:")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    why = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if len(lines) > 1 and lines[0].endswith(":"):
        why += " " + lines[1]
    return why


def _time_run(cfg: Config, r: Run, init, steps: int, seed: int, gpu: str, say) -> dict:
    """The run's setups, one storage dtype at a time: built, warmed up, then
    timed in ROUNDS rounds of steps, the order rotating; {setup: TrainRecord}."""
    torch = _torch()
    out = {}
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    inputs, targets = make_batch(cfg, cfg.batch, cfg.seq, DEVICE, gen)
    for storage in dict.fromkeys(SETUPS[s][0] for s in r.setups):
        group = [s for s in r.setups if SETUPS[s][0] == storage]
        live, times, warm, losses = {}, {s: [] for s in group}, {}, {}
        x = inputs.to(getattr(torch, storage)) if cfg.kind == "vision" else inputs
        try:
            for s in group:
                state = {k: v.to(getattr(torch, storage)) for k, v in init.items()}
                live[s] = _Instance(cfg, s, r.mode, state)
                del state
                try:
                    warm[s], _ = _sync_time(lambda: [live[s].step(x, targets) for _ in range(WARMUP_STEPS)])
                    say(f"  {cfg.name} {r.mode} {s}: {WARMUP_STEPS} warm-up steps in {warm[s]:.1f} s")
                except Exception as exc:  # noqa: BLE001 - a setup that cannot run is reported, the rest go on
                    out[s] = _record(gpu, cfg, r.mode, s, failed=_why(exc))
                    say(f"  {cfg.name} {r.mode} {s}: FAILED, {out[s].failed}")
                    del live[s]
                    _empty_cache()
            order, rounds = list(live), min(ROUNDS, steps)
            per_round = math.ceil(steps / rounds)
            for k in range(rounds):
                for s in order[k % len(order) :] + order[: k % len(order)] if order else []:
                    for _ in range(per_round):
                        t, loss = _sync_time(lambda: live[s].step(x, targets))
                        times[s].append(1e3 * t)
                        losses[s] = loss
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: this dtype's setups fail, the rest go on
            why = _why(exc)
            for s in group:
                out.setdefault(s, _record(gpu, cfg, r.mode, s, failed=why))
            say(f"  {cfg.name} {r.mode} {storage}: FAILED, {why}")
        for s in group:
            if s in out:
                continue
            ms = statistics.median(times[s])
            out[s] = _record(
                gpu,
                cfg,
                r.mode,
                s,
                ms=ms,
                ms_all=times[s],
                items_per_s=cfg.items_per_step() / (ms * 1e-3),
                warmup_s=warm[s],
                loss=float(losses[s]),
            )
            say(f"  {cfg.name} {r.mode} {s}: {ms:.1f} ms per step, {out[s].items_per_s:,.0f} {cfg.items}/s")
        live.clear()
        _empty_cache()
    for s, rec in out.items():
        base = BASELINE.get(s)
        if rec.ms and base in out and out[base].ms:
            rec.vs_baseline = out[base].ms / rec.ms
        if s == "fp32_tc" and rec.ms and "tf32" in out and out["tf32"].ms:
            rec.vs_tf32 = rec.ms / out["tf32"].ms
    return out


def schedule(cfg: Config, setup: str | None, init, seed: int, dtype=None) -> tuple[list[float], object]:
    """The short schedule: DRIFT_STEPS AdamW steps on a small batch (the same
    for every setup), eager; the losses and the model.  ``setup`` None: plain
    PyTorch in ``dtype`` (the float64 reference)."""
    torch = _torch()
    storage = dtype or getattr(torch, SETUPS[setup][0])
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 1)
    batches = [make_batch(cfg, cfg.drift_batch, min(cfg.drift_seq, cfg.seq), DEVICE, gen) for _ in range(DRIFT_STEPS)]
    inst = _Instance(cfg, setup or "fp32", "eager", {k: v.to(storage) for k, v in init.items()}, dtype=storage)
    losses = []
    for inputs, targets in batches:
        x = inputs.to(storage) if cfg.kind == "vision" else inputs
        losses.append(float(inst.step(x, targets)))
    return losses, inst.model


def _drift(cfg: Config, setups, init, seed: int, records: dict, say) -> None:
    """The float64 schedule, then each setup's; the drifts into ``records`` (eager)."""
    torch = _torch()
    ref_losses, ref = schedule(cfg, None, init, seed, dtype=torch.float64)
    ref_params = {k: v.detach() for k, v in ref.named_parameters()}
    moved = math.sqrt(sum(float((ref_params[k] - init[k].double()).square().sum()) for k in ref_params))
    size = math.sqrt(sum(float(v.square().sum()) for v in ref_params.values()))
    for s in setups:
        rec = records.get(s)
        if rec is None or rec.failed:
            continue
        try:
            losses, model = schedule(cfg, s, init, seed)
        except Exception as exc:  # noqa: BLE001
            say(f"  {cfg.name} {s}: the float64 comparison failed, {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        diff = math.sqrt(
            sum(float((p.detach().double() - ref_params[k]).square().sum()) for k, p in model.named_parameters())
        )
        rec.loss_drift = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        rec.weight_drift = diff / moved if moved else None
        rec.weight_rel = diff / size
        say(
            f"  {cfg.name} {s}: against float64 over {DRIFT_STEPS} steps: loss {rec.loss_drift:.1e}, "
            f"weights {_fmt(rec.weight_drift, '.1e')} of their move"
        )
        del model
    del ref, ref_params
    _empty_cache()


# -- output ------------------------------------------------------------------------


def table(data: dict) -> str:
    recs = data["records"]
    head = (
        f"{'model':10s} {'mode':15s} {'setup':13s} {'ms/step':>9s} {'items/s':>12s} {'vs PyTorch':>18s} "
        f"{'loss drift':>10s} {'W drift':>8s} {'W rel':>8s}"
    )
    lines = [head, "-" * len(head)]
    for r in recs:
        row = f"{r['model']:10s} {r['mode']:15s} {r['setup']:13s} "
        if r.get("failed") or r.get("skipped"):
            lines.append(row + ("FAILED: " + r["failed"] if r.get("failed") else "skipped: " + r["skipped"]))
            continue
        vs = "-"
        if r.get("vs_baseline"):
            vs = f"{r['vs_baseline']:.2f}x {r['baseline']}"
            if r["setup"] == "bf16_gemmlab":
                vs = f"{100 * r['vs_baseline']:.1f}% of {r['baseline']}"
        lines.append(
            row + f"{_fmt(r['ms'], '.1f'):>9s} {_fmt(r['items_per_s'], ',.0f'):>12s} {vs:>18s} "
            f"{_fmt(r.get('loss_drift'), '.1e'):>10s} {_fmt(r.get('weight_drift'), '.1e'):>8s} "
            f"{_fmt(r.get('weight_rel'), '.1e'):>8s}"
        )
    lines.append("")
    for r in recs:
        if r["setup"] == "fp32_tc" and r.get("vs_baseline"):
            lines.append(
                f"{r['model']} {r['mode']}: fp32_tc {r['vs_baseline']:.2f}x as fast as the SGEMM step"
                + (f", its time {r['vs_tf32']:.2f}x TF32's" if r.get("vs_tf32") else "")
            )
        if r["setup"] == "bf16_gemmlab" and r.get("vs_baseline"):
            lines.append(
                f"{r['model']} {r['mode']}: bf16 through gemmlab at {100 * r['vs_baseline']:.1f}% of "
                "PyTorch's step speed"
            )
    lines.append(
        f"ms/step: median of the timed steps (setups of one dtype alternating in rounds); items: tokens "
        f"(images for vit-b16); drifts (eager): {DRIFT_STEPS} AdamW steps of a small batch beside float64 "
        "from the same weights: the loss's largest relative difference, the weights' difference relative "
        "to float64's move (W drift) and to their norm (W rel)"
    )
    return "\n".join(lines)


def plot(data: dict, path) -> None:
    """ms per step per model and mode, a bar per setup; and the weight drift of each eager setup."""
    plt = _pyplot()
    recs = [r for r in data["records"] if r.get("ms")]
    groups = list(dict.fromkeys((r["model"], r["mode"]) for r in data["records"]))
    setups = [s for s in SETUPS if any(r["setup"] == s for r in data["records"])]
    color = {s: f"C{i}" for i, s in enumerate(SETUPS)}
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(max(10.0, 1.3 * len(groups) + 6), 5), gridspec_kw={"width_ratios": [max(2, len(groups)), 2]}
    )
    width = 0.8 / max(1, len(setups))
    for j, s in enumerate(setups):
        xs, ys = [], []
        for i, g in enumerate(groups):
            hit = [r for r in recs if (r["model"], r["mode"]) == g and r["setup"] == s]
            if hit:
                xs.append(i + (j - (len(setups) - 1) / 2) * width)
                ys.append(hit[0]["ms"])
        ax1.bar(xs, ys, width, label=s, color=color[s])
    ax1.set_xticks(range(len(groups)))
    ax1.set_xticklabels([f"{m}\n{mode}" for m, mode in groups], fontsize=7)
    ax1.set_ylabel("ms per training step (median)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=7)
    ax1.grid(axis="y", alpha=0.3, which="both")
    drifted = [r for r in recs if r.get("weight_drift")]
    models = list(dict.fromkeys(r["model"] for r in drifted))
    for j, s in enumerate(setups):
        pts = [
            (models.index(r["model"]) + (j - (len(setups) - 1) / 2) * width, r["weight_drift"])
            for r in drifted
            if r["setup"] == s
        ]
        if pts:
            ax2.bar([p[0] for p in pts], [p[1] for p in pts], width, label=s, color=color[s])
    ax2.set_xticks(range(len(models)))
    ax2.set_xticklabels(models, fontsize=7)
    ax2.set_yscale("log")
    ax2.set_ylabel("||W - W_float64|| / ||W_float64 - W_0||")
    ax2.set_title(f"weights after {DRIFT_STEPS} steps, beside float64", fontsize=9)
    ax2.grid(axis="y", alpha=0.3, which="both")
    fig.suptitle(f"training steps through gemmlab.torch beside PyTorch, {data.get('gpu', 'GPU')}", fontsize=10)
    savefig(fig, path)
