"""`gemmlab bench --suite shapes`: the products many public models make, through
``gemmlab.matmul`` beside ``torch.matmul`` on the same PyTorch views.

The generator (:func:`generate`) takes each model of MODELS (published sizes,
the source named in the table) and makes:

- each linear layer's three products at the model's token counts, exactly the
  views training hands to matmul: forward ``x @ W.t()``, input gradient
  ``dY @ W`` and weight gradient ``dY.t() @ x`` (models.linear_case);
- attention's batched products ``Q @ K.transpose(-1, -2)`` and ``P @ V`` at
  batch x heads, sequence and head dim of the model (models.attention_case);
- the layers of TRANSPOSED_LAYERS at their largest token count once more, on
  activations stored feature-major: ``x_t.t() @ W.t()``, both operands transposed views
  (a channels-first buffer; NumPy's ``a.T @ b.T``), the layout no model's training makes;

then RANDOM_LAYERS linear layers and RANDOM_ATTENTION attention shapes of odd
sizes drawn from a seeded generator, in the same views.  Where two models make
the same product (same shape, layout and batch) it is kept once, under the
first model.  Each product is tagged with its kinds (KINDS, :func:`kinds_of`):
the first that applies is the kind the summary groups it under.

Timing, the FP64 check of a sample of the output and the time budget are the
models suite's (models.measure): fp32 and fp32_tc are compared with cuBLAS
SGEMM (torch.matmul in float32, TF32 off).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields

from . import models
from .report import _fmt, _pyplot, read_models_file, savefig


# One row per model: its published sizes, and the token counts and attention
# shapes the suite takes from it.  ``layers``: (name, in features, out features)
# or (name, in, out, token counts of its own); ``attention``: (batch x heads,
# sequence) pairs at ``head_dim``; ``decode``: attention at one decoding step,
# (batch x key/value heads, query rows per key/value head, cached positions); ``decode_cache``:
# the same against a cache allocated for more positions (..., cached positions, capacity).
# Sizes are those of each model's published
# configuration (the Hugging Face config.json of the repository named under
# ``source``, or the paper).
@dataclass(frozen=True)
class ModelShapes:
    name: str
    family: str
    source: str
    tokens: tuple
    layers: tuple
    head_dim: int
    attention: tuple
    decode: tuple = ()
    decode_cache: tuple = ()


MODELS = {
    m.name: m
    for m in (
        # Llama 3.2 1B: hidden 2048, 32 heads of 64, 8 KV heads, FFN 8192, vocab 128256.
        ModelShapes(
            "llama-3.2-1b",
            "decoder, GQA",
            "meta-llama/Llama-3.2-1B config.json",
            (1, 2048),
            (
                ("q", 2048, 2048),
                ("kv", 2048, 512),
                ("o", 2048, 2048),
                ("up", 2048, 8192),
                ("down", 8192, 2048),
                ("lm_head", 2048, 128256),
            ),
            64,
            ((32, 2048),),
            decode=((64, 4, 4097),),
        ),
        # Llama 3.2 3B: hidden 3072, 24 heads of 128, 8 KV heads, FFN 8192.
        ModelShapes(
            "llama-3.2-3b",
            "decoder, GQA",
            "meta-llama/Llama-3.2-3B config.json",
            (4, 512),
            (
                ("q", 3072, 3072),
                ("kv", 3072, 1024),
                ("o", 3072, 3072),
                ("up", 3072, 8192),
                ("down", 8192, 3072),
                ("lm_head", 3072, 128256),
            ),
            128,
            ((96, 512),),
        ),
        # Llama 3 8B: hidden 4096, 32 heads of 128, 8 KV heads, FFN 14336.
        ModelShapes(
            "llama-3-8b",
            "decoder, GQA",
            "meta-llama/Meta-Llama-3-8B config.json",
            (16,),
            (
                ("q", 4096, 4096),
                ("kv", 4096, 1024),
                ("o", 4096, 4096),
                ("up", 4096, 14336),
                ("down", 14336, 4096),
                ("lm_head", 4096, 128256),
            ),
            128,
            ((32, 128),),
            decode=((8, 4, 8193),),
            decode_cache=((8, 4, 3001, 8192),),
        ),
        # Qwen2.5 7B: hidden 3584, 28 heads of 128, 4 KV heads, FFN 18944, vocab 152064.
        ModelShapes(
            "qwen2.5-7b",
            "decoder, GQA",
            "Qwen/Qwen2.5-7B config.json",
            (77, 2048),
            (
                ("q", 3584, 3584),
                ("kv", 3584, 512),
                ("o", 3584, 3584),
                ("up", 3584, 18944),
                ("down", 18944, 3584),
                ("lm_head", 3584, 152064),
            ),
            128,
            ((28, 2048),),
            decode=((64, 7, 2049),),
        ),
        # Mistral 7B v0.1: hidden 4096, 32 heads of 128, 8 KV heads, FFN 14336, vocab 32000.
        ModelShapes(
            "mistral-7b",
            "decoder, GQA",
            "mistralai/Mistral-7B-v0.1 config.json",
            (1000,),
            (
                ("q", 4096, 4096),
                ("kv", 4096, 1024),
                ("o", 4096, 4096),
                ("up", 4096, 14336),
                ("down", 14336, 4096),
                ("lm_head", 4096, 32000),
            ),
            128,
            ((128, 1000),),
            decode=((32, 4, 1000),),
            decode_cache=((32, 4, 1500, 4096),),
        ),
        # Gemma 2 2B: hidden 2304, 8 heads of 256, 4 KV heads, FFN 9216, vocab 256000.
        ModelShapes(
            "gemma-2-2b",
            "decoder, GQA, head 256",
            "google/gemma-2-2b config.json",
            (1, 512),
            (
                ("q", 2304, 2048),
                ("kv", 2304, 1024),
                ("o", 2048, 2304),
                ("up", 2304, 9216),
                ("down", 9216, 2304),
                ("lm_head", 2304, 256000),
            ),
            256,
            ((8, 512),),
            decode=((32, 2, 513),),
        ),
        # Phi-3 mini 4k: hidden 3072, 32 heads of 96, fused qkv and gate_up, FFN 8192, vocab 32064.
        ModelShapes(
            "phi-3-mini",
            "decoder, head 96",
            "microsoft/Phi-3-mini-4k-instruct config.json",
            (4, 2048),
            (
                ("qkv", 3072, 9216),
                ("o", 3072, 3072),
                ("gate_up", 3072, 16384),
                ("down", 8192, 3072),
                ("lm_head", 3072, 32064),
            ),
            96,
            ((128, 2048),),
            decode=((128, 1, 2049),),
            decode_cache=((128, 1, 1000, 4096),),
        ),
        # GPT-2 small: hidden 768, 12 heads of 64, FFN 3072, vocab 50257 (odd), context 1024.
        ModelShapes(
            "gpt2",
            "decoder, vocab 50257",
            "openai-community/gpt2 config.json",
            (1024, 4096),
            (("qkv", 768, 2304), ("o", 768, 768), ("up", 768, 3072), ("down", 3072, 768), ("lm_head", 768, 50257)),
            64,
            ((48, 1024),),
            decode=((96, 1, 1025),),
            decode_cache=((96, 1, 700, 1024),),
        ),
        # BERT base: hidden 768, 12 heads of 64, FFN 3072, vocab 30522, MLM head (transform, decoder).
        ModelShapes(
            "bert-base",
            "encoder, vocab 30522",
            "google-bert/bert-base-uncased config.json",
            (128, 4096),
            (
                ("q", 768, 768),
                ("o", 768, 768),
                ("up", 768, 3072),
                ("down", 3072, 768),
                ("mlm_transform", 768, 768),
                ("mlm_decoder", 768, 30522),
            ),
            64,
            ((12, 128), (96, 512)),
        ),
        # ViT-B/16 at 224: 196 patches + a class token = 197 tokens, hidden 768, 12 heads of 64.
        ModelShapes(
            "vit-b16",
            "vision, 197 tokens",
            "Dosovitskiy et al. 2021, ViT-Base/16; google/vit-base-patch16-224",
            (197, 12608),
            (
                ("patch", 768, 768, (196, 12544)),
                ("qkv", 768, 2304),
                ("o", 768, 768),
                ("up", 768, 3072),
                ("down", 3072, 768),
                ("head", 768, 1000, (1, 64)),
            ),
            64,
            ((384, 197), (768, 197)),
        ),
        # Whisper small: d_model 768, 12 heads of 64, FFN 3072, 1500 encoder frames, vocab 51865.
        ModelShapes(
            "whisper-small",
            "speech, 1500 frames",
            "openai/whisper-small config.json",
            (1500, 12000),
            (
                ("q", 768, 768),
                ("o", 768, 768),
                ("up", 768, 3072),
                ("down", 3072, 768),
                ("lm_head", 768, 51865, (1, 448)),
            ),
            64,
            ((96, 1500),),
            decode=((48, 1, 1500),),
        ),
        # Mixtral 8x7B: hidden 4096, 8 experts of FFN 14336, top 2; each expert gets a few rows.
        ModelShapes(
            "mixtral-8x7b",
            "MoE, few rows per expert",
            "mistralai/Mixtral-8x7B-v0.1 config.json",
            (512,),
            (
                ("q", 4096, 4096),
                ("kv", 4096, 1024),
                ("router", 4096, 8),
                ("expert_up", 4096, 14336, (3, 37, 509)),
                ("expert_gate", 4096, 14336, (131,)),
                ("expert_down", 14336, 4096, (3, 37, 509)),
            ),
            128,
            ((32, 512),),
            decode=((64, 4, 4096),),
        ),
        # CLIP ViT-L/14 at 224: 256 patches + a class token = 257 tokens, hidden 1024, 16 heads of 64;
        # its text encoder: 77 tokens, 12 heads of 64.
        ModelShapes(
            "clip-vit-l14",
            "vision, 257 tokens",
            "openai/clip-vit-large-patch14 config.json",
            (257, 8224),
            (
                ("patch", 588, 1024, (256, 8192)),
                ("qkv", 1024, 3072),
                ("o", 1024, 1024),
                ("up", 1024, 4096),
                ("down", 4096, 1024),
                ("text_qkv", 768, 2304, (77, 4928)),
            ),
            64,
            ((512, 257), (768, 77)),
        ),
        # The ten below were first timed as products no suite named (benchmarks/NOTES.md,
        # "Products and models no suite names"), then kept for the kinds they brought.
        # SmolLM-360M: hidden 960, 15 heads of 64, 5 KV heads, FFN 2560 (gate and up fused here).
        ModelShapes(
            "smollm-360m",
            "decoder, GQA 15/5, d = 960",
            "HuggingFaceTB/SmolLM-360M config.json",
            (3, 4096),
            (
                ("q", 960, 960),
                ("kv", 960, 640),
                ("o", 960, 960),
                ("gate_up", 960, 5120),
                ("down", 2560, 960),
                ("lm_head", 960, 49152),
            ),
            64,
            ((60, 1024),),
            decode=((40, 3, 700),),
        ),
        # Falcon-7B: hidden 4544, 71 heads of 64 sharing one KV head (fused qkv of 73 heads), FFN 18176;
        # a weight gradient at 7 tokens, and a decoding step of 71 query rows against one KV head.
        ModelShapes(
            "falcon-7b",
            "decoder, MQA, 71 heads",
            "tiiuae/falcon-7b config.json",
            (7, 2048),
            (
                ("qkv", 4544, 4672),
                ("dense", 4544, 4544),
                ("up", 4544, 18176),
                ("down", 18176, 4544),
                ("lm_head", 4544, 65024),
            ),
            64,
            ((142, 2048),),
            decode=((4, 71, 1500),),
        ),
        # DeiT-S at 224: 197 tokens x 256 images, hidden 384, 6 heads of 64.
        ModelShapes(
            "deit-s",
            "vision, d = 384",
            "facebook/deit-small-patch16-224 config.json",
            (50432,),
            (
                ("patch", 768, 384, (50176,)),
                ("qkv", 384, 1152),
                ("proj", 384, 384),
                ("fc1", 384, 1536),
                ("fc2", 1536, 384),
                ("head", 384, 1000, (256,)),
            ),
            64,
            ((1536, 197),),
        ),
        # Stable Diffusion 1.5's U-Net transformer blocks at 512 x 512, batch 2: 8 heads of 40, 80
        # and 160 at 4096, 1024 and 256 positions; GEGLU feed-forward; cross-attention keys from
        # 77 text tokens of 768.
        ModelShapes(
            "sd15-unet-320",
            "diffusion U-Net attention, head 40",
            "runwayml/stable-diffusion-v1-5 unet/config.json",
            (8192,),
            (("to_q", 320, 320), ("to_kv", 768, 320, (154,)), ("geglu", 320, 2560), ("ff_out", 1280, 320)),
            40,
            ((16, 4096),),
        ),
        ModelShapes(
            "sd15-unet-640",
            "diffusion U-Net attention, head 80",
            "runwayml/stable-diffusion-v1-5 unet/config.json",
            (2048,),
            (("to_q", 640, 640), ("geglu", 640, 5120), ("ff_out", 2560, 640)),
            80,
            ((16, 1024),),
        ),
        ModelShapes(
            "sd15-unet-1280",
            "diffusion U-Net attention, head 160",
            "runwayml/stable-diffusion-v1-5 unet/config.json",
            (512,),
            (("to_q", 1280, 1280), ("geglu", 1280, 10240), ("ff_out", 5120, 1280)),
            160,
            ((16, 256),),
        ),
        # DeepSeek-V2-Lite: hidden 2048, multi-head latent attention (queries 16 x 192, keys and
        # values from a 512-wide latent plus 64 rope dims), 64 routed experts of FFN 1408.
        ModelShapes(
            "deepseek-v2-lite",
            "decoder, MLA, 64 experts",
            "deepseek-ai/DeepSeek-V2-Lite config.json",
            (2048,),
            (
                ("q", 2048, 3072),
                ("kv_a", 2048, 576),
                ("kv_b", 512, 4096),
                ("o", 2048, 2048),
                ("expert_up", 2048, 2816, (90, 333)),
                ("expert_down", 1408, 2048, (90, 333)),
                ("lm_head", 2048, 102400),
            ),
            192,
            ((32, 2048),),
        ),
        # Swin-T at 224, 32 images: 7 x 7 windows of 49 tokens, heads of 32; stage 1 (d = 96,
        # 3136 positions an image) and stage 3 (d = 384, 196).
        ModelShapes(
            "swin-t",
            "vision, 7 x 7 windows, head 32",
            "microsoft/swin-tiny-patch4-window7-224 config.json",
            (100352,),
            (
                ("qkv", 96, 288),
                ("proj", 96, 96),
                ("fc1", 96, 384),
                ("fc2", 384, 96),
                ("s3_qkv", 384, 1152, (6272,)),
                ("s3_fc1", 384, 1536, (6272,)),
            ),
            32,
            ((6144, 49), (1536, 49)),
        ),
        # Mamba-130M: hidden 768, inner 1536, x_proj to dt_rank 48 + 2 x 16 states, no attention.
        ModelShapes(
            "mamba-130m",
            "state space, no attention",
            "state-spaces/mamba-130m config.json",
            (4096,),
            (
                ("in_proj", 768, 3072),
                ("x_proj", 1536, 80),
                ("dt_proj", 48, 1536),
                ("out_proj", 1536, 768),
                ("lm_head", 768, 50280),
            ),
            64,
            (),
        ),
        # Gemma-7B: hidden 3072, 16 heads of 256, FFN 24576, a 256000-word vocabulary.
        ModelShapes(
            "gemma-7b",
            "decoder, head 256",
            "google/gemma-7b config.json",
            (1, 512),
            (
                ("qkv", 3072, 12288),
                ("o", 4096, 3072),
                ("gate_up", 3072, 49152),
                ("down", 24576, 3072),
                ("lm_head", 3072, 256000),
            ),
            256,
            ((16, 512),),
        ),
    )
}
# Each model's layers also timed as x_t.t() @ W.t() (op(A) and op(B) transposed views), at the
# largest token count the layer is timed at.
TRANSPOSED_LAYERS = ("o", "up", "gate_up", "expert_up")
RANDOM = "random"
RANDOM_LAYERS = 20  # linear layers of random odd sizes (three products each)
RANDOM_ATTENTION = 6  # attention shapes of random odd sequence length (two products each)
RANDOM_SIZES = (33, 8191)  # drawn log-uniform, odd
RANDOM_HEAD_DIMS = (64, 80, 96, 128)

# The kinds of product, in the order the first that applies names its kind.
KINDS = {
    "decode": "batched products of at most 16 rows each (attention at one decoding step: a query row, "
    "or a grouped-query group of rows, per key/value head)",
    "batched_odd": "batched products with M, N or K not a multiple of 64 (attention at odd S)",
    "batched": "batched products (attention)",
    "odd_align": "N, or a stored operand's row stride, not a multiple of 8 elements (16 bytes in 16-bit)",
    "small_m": "M <= 256 (decode, few tokens, few rows per expert)",
    "small_k": "K <= 256 (a weight gradient over few tokens)",
    "few_tiles": "fewer 128 x 128 output tiles than an H100/H200 has SMs (132)",
    "nt": "x @ W.t(): op(B) a transposed view, none of the above",
    "tn": "dY.t() @ x: op(A) a transposed view, none of the above",
    "tt": "x_t.t() @ W.t(): both operands transposed views, none of the above",
    "nn": "both row-major, none of the above",
}
SMALL = 256
DECODE_ROWS = 16
TILE, SMS = 128, 132
DTYPES = ("bf16", "fp16", "fp32", "fp32_tc")  # the default; models.DTYPES names the choices
TIME_BUDGET_S = 150.0  # timed repeats beyond each product's fewest runs
SLOW_PCT = 90.0  # the target: every product at >= 90% of torch.matmul
BIG_GFLOP = 1.0  # fp32_tc's target is over products of >= 1 GFLOP


def kinds_of(M: int, N: int, K: int, batch: int, ops: str, stored) -> tuple[str, ...]:
    """Every kind of KINDS that applies, in KINDS' order (the layout kind last, always)."""
    kinds = []
    if batch > 1 and M <= DECODE_ROWS:
        kinds.append("decode")
    if batch > 1:
        kinds.append("batched_odd" if any(d % 64 for d in (M, N, K)) else "batched")
    if N % 8 or any(shape[-1] % 8 for shape in stored):
        kinds.append("odd_align")
    if batch == 1 and M <= SMALL:
        kinds.append("small_m")
    if batch == 1 and K <= SMALL:
        kinds.append("small_k")
    if batch * math.ceil(M / TILE) * math.ceil(N / TILE) < SMS:
        kinds.append("few_tiles")
    kinds.append({"NT": "nt", "TN": "tn", "TT": "tt"}.get(ops, "nn"))
    return tuple(kinds)


@dataclass(frozen=True)
class Product(models.Case):
    """A models.Case taken from a named model: its kinds, and its records' tags."""

    model: str = ""

    @property
    def kinds(self) -> tuple[str, ...]:
        return kinds_of(self.M, self.N, self.K, self.batch, self.ops, self.stored)

    @property
    def kind(self) -> str:
        return self.kinds[0]

    @property
    def name(self) -> str:
        return f"{self.model}:{self.layer}.{self.product}"

    @property
    def label(self) -> str:
        return f"{self.name} {self.shape} {self.ops}"

    def tags(self) -> dict:
        return {"model": self.model, "kind": self.kind, "kinds": list(self.kinds), "view": self.product}


def _product(case: models.Case, model: str) -> Product:
    """The models suite's case, as a product of ``model``."""
    return Product(**{f.name: getattr(case, f.name) for f in fields(case)}, model=model)


def _views(model: str, linear, attention, decode=(), decode_cache=()) -> list[Product]:
    """Every view of ``model``'s linear layers [(name, tokens, (fan_in, fan_out))], attention
    shapes [(batch x heads, sequence, head dim)] and decoding steps [(batch x key/value heads,
    query rows per key/value head, cached positions, head dim)], also against a larger cache
    [(..., cached positions, capacity, head dim)]."""
    out = [
        _product(models.linear_case(name, view, tokens, dims), model)
        for name, tokens, dims in linear
        for view in models.LINEAR_PRODUCTS
    ]
    out += [
        _product(models.attention_case(view, bh, seq, hd), model)
        for bh, seq, hd in attention
        for view in models.TRAINING_ATTENTION_PRODUCTS
    ]
    out += [
        _product(models.decode_case(view, bkv, rows, ctx, hd), model)
        for bkv, rows, ctx, hd in decode
        for view in models.ATTENTION_PRODUCTS
    ]
    return out + [
        _product(models.decode_cache_case(view, bkv, rows, ctx, cap, hd), model)
        for bkv, rows, ctx, cap, hd in decode_cache
        for view in models.ATTENTION_PRODUCTS
    ]


def _model_products(m: ModelShapes) -> list[Product]:
    linear = [
        (layer[0], tokens, (layer[1], layer[2]))
        for layer in m.layers
        for tokens in (layer[3] if len(layer) > 3 else m.tokens)
    ]
    largest = {}  # layer of TRANSPOSED_LAYERS -> (its largest token count, its features)
    for name, tokens, dims in linear:
        if name in TRANSPOSED_LAYERS:
            largest[name] = (max(tokens, largest.get(name, (0,))[0]), dims)
    transposed = [
        _product(models.linear_case(name, "fwd_t", tokens, dims), m.name) for name, (tokens, dims) in largest.items()
    ]
    return (
        _views(
            m.name,
            linear,
            [(bh, seq, m.head_dim) for bh, seq in m.attention],
            [(bkv, rows, ctx, m.head_dim) for bkv, rows, ctx in m.decode],
            [(bkv, rows, ctx, cap, m.head_dim) for bkv, rows, ctx, cap in m.decode_cache],
        )
        + transposed
    )


def _random_products(seed: int) -> list[Product]:
    """Odd sizes from ``random.Random(seed)``: linear layers and attention shapes."""
    rng = random.Random(seed)
    lo, hi = RANDOM_SIZES

    def odd():
        return int(math.exp(rng.uniform(math.log(lo), math.log(hi)))) | 1

    linear = []
    for i in range(RANDOM_LAYERS):
        dims, tokens = (odd(), odd()), odd()
        linear.append((f"linear{i}", tokens, dims))
    attention = [
        (rng.choice((8, 12, 32, 48, 96)), rng.randrange(65, 2049) | 1, rng.choice(RANDOM_HEAD_DIMS))
        for _ in range(RANDOM_ATTENTION)
    ]
    return _views(RANDOM, linear, attention)


def generate(seed: int = 0, own=None) -> list[Product]:
    """Every product of MODELS, then the random ones of ``seed`` (or, given ``own``, every
    product of those models only: load_models); each (shape, layout, batch) once, under the
    first model that makes it."""
    seen, out = set(), []
    made = (
        [p for m in own for p in _model_products(m)]
        if own is not None
        else [p for m in MODELS.values() for p in _model_products(m)] + _random_products(seed)
    )
    for p in made:
        key = (p.M, p.N, p.K, p.batch, p.ops)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


# -- a user's own models (--model-file) -----------------------------------------------


def _counts(value, where: str, n: int | None = None) -> tuple:
    """``value`` as a tuple of positive integers (``n`` of them, or any number but none),
    else a ValueError naming ``where``."""
    ok = isinstance(value, list) and (len(value) == n if n else len(value) > 0)
    if not ok or not all(type(x) is int and x > 0 for x in value):
        raise ValueError(f"{where}: give {n or 'a list of'} positive integers")
    return tuple(value)


def load_models(path) -> list[ModelShapes]:
    """The models of a JSON file (``gemmlab bench --suite shapes --model-file``): a list of
    objects, each with ``name``, ``head_dim`` and ``layers`` -- [name, in features, out
    features] or [..., [token counts of its own]] -- and optionally ``tokens`` (the token
    counts, default [2048]), ``attention`` ([[batch x heads, sequence], ...]), ``decode``
    ([[batch x key/value heads, query rows per key/value head, cached positions], ...]),
    ``family`` and ``source``.  Each makes the products the suite's own models make.  A file
    that does not say so is refused, naming the model and the field."""
    where, data = str(path), read_models_file(path, "--model-file")
    out, known = [], {*MODELS, RANDOM}
    for i, m in enumerate(data):
        at = f"--model-file {where}, model {i}"
        if not isinstance(m, dict):
            raise ValueError(f"{at}: give an object")
        unknown = set(m) - {"name", "family", "source", "tokens", "layers", "head_dim", "attention", "decode"}
        if unknown:
            raise ValueError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
        name = m.get("name")
        if not isinstance(name, str) or not name or name in known:
            why = "is one of the suite's own" if name in known else "give a new name (a string)"
            raise ValueError(f"{at}: name {name!r}: {why}")
        known.add(name)
        at = f"--model-file {where}, model {name!r}"
        layers = m.get("layers")
        if not isinstance(layers, list) or not layers:
            raise ValueError(f"{at}: layers: give a list of [name, in features, out features]")
        parsed = []
        for j, layer in enumerate(layers):
            if not isinstance(layer, list) or len(layer) not in (3, 4) or not isinstance(layer[0], str):
                raise ValueError(f"{at}: layers[{j}]: give [name, in features, out features(, [token counts])]")
            dims = _counts(layer[1:3], f"{at}: layers[{j}]'s features", 2)
            own = (_counts(layer[3], f"{at}: layers[{j}]'s token counts"),) if len(layer) == 4 else ()
            parsed.append((layer[0], *dims, *own))
        head_dim = m.get("head_dim")
        if type(head_dim) is not int or head_dim < 1:
            raise ValueError(f"{at}: head_dim: give a positive integer")
        tokens = _counts(m.get("tokens", [2048]), f"{at}: tokens")
        for field in ("attention", "decode"):
            if not isinstance(m.get(field, []), list):
                raise ValueError(f"{at}: {field}: give a list of lists of positive integers")
        attention = tuple(_counts(a, f"{at}: attention[{k}]", 2) for k, a in enumerate(m.get("attention", [])))
        decode = tuple(_counts(d, f"{at}: decode[{k}]", 3) for k, d in enumerate(m.get("decode", [])))
        family, source = m.get("family", "from a model file"), m.get("source", where)
        out.append(ModelShapes(name, str(family), str(source), tokens, tuple(parsed), head_dim, attention, decode))
    return out


# -- options ----------------------------------------------------------------------


def parse_models(text: str, known=None) -> list[str]:
    """--models' names, of the suite's models (or of ``known``, a model file's)."""
    return models._names(text, known or [*MODELS, RANDOM], "--models")


def parse_kinds(text: str) -> list[str]:
    return models._names(text, KINDS, "--kinds")


def select(
    *,
    seed: int = 0,
    model_names=None,
    kinds=None,
    limit: int | None = None,
    sample: int | None = None,
    own=None,
) -> list[Product]:
    """The suite's products (or those of the models ``own``, load_models): those of
    ``model_names`` having any of ``kinds``; then the first ``limit`` of them, or
    ``sample`` of them drawn with ``seed`` (in generator order)."""
    if limit is not None and sample is not None:
        raise ValueError("give --limit or --sample, not both")
    for option, n in (("--limit", limit), ("--sample", sample)):
        if n is not None and n < 1:
            raise ValueError(f"{option} {n}: give a number of products, 1 or more")
    products = [
        p
        for p in generate(seed, own)
        if (model_names is None or p.model in model_names) and (kinds is None or set(kinds) & set(p.kinds))
    ]
    if not products:
        raise ValueError("the selection (--models, --kinds) has no products")
    if limit is not None:
        return products[:limit]
    if sample is not None and sample < len(products):
        keep = set(random.Random(seed).sample(range(len(products)), sample))
        return [p for i, p in enumerate(products) if i in keep]
    return products


# -- the run, the summary, the table, the plot --------------------------------------


def run(products, dtypes, *, time_budget_s: float = TIME_BUDGET_S, own=None, **timing) -> dict:
    """Time each product in each dtype (models.measure: the time budget is shared
    in proportion to each pair's expected time, so with 400+ products most get
    time_gpu's fewest runs); {"records", "summary", "models"} (``own``: the models
    the products came from, where not the suite's)."""
    dicts = models.measure(products, dtypes, time_budget_s=time_budget_s, **timing)
    return {"records": dicts, "summary": summary(dicts), "models": sources(own)}


def sources(own=None) -> dict:
    """{model: (family, source)}: where each model's sizes come from (the suite's, or ``own``)."""
    return {m.name: {"family": m.family, "source": m.source} for m in (own or MODELS.values())}


def gflop(rec: dict) -> float:
    return 2.0 * rec["batch"] * rec["M"] * rec["N"] * rec["K"] / 1e9


def _stats(recs: list[dict]) -> dict:
    timed, geomean, worst = models.pct_stats(recs)
    return {
        "products": len(timed),
        "below_90": sum(r["pct_torch"] < SLOW_PCT for r in timed),
        "geomean_pct": geomean,
        "worst_pct": worst["pct_torch"] if worst else None,
        "worst": _name(worst) if worst else None,
        "skipped": sum(bool(r.get("skipped")) and r.get("ok") is not False for r in recs),
        "failed": sum(r.get("ok") is False for r in recs),
    }


def _name(rec: dict) -> str:
    shape = ("" if rec["batch"] == 1 else f"{rec['batch']}x") + f"{rec['M']}x{rec['N']}x{rec['K']}"
    return f"{rec['case']} {shape} {rec['ops']}"


def summary(records: list[dict]) -> dict:
    """Per dtype: all products, each kind's, and for fp32_tc those of >= 1 GFLOP."""
    out = {}
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        mine = [r for r in records if r["dtype"] == dtype]
        entry = {
            "all": _stats(mine),
            "kinds": {
                k: _stats([r for r in mine if r["tags"]["kind"] == k])
                for k in KINDS
                if any(r["tags"]["kind"] == k for r in mine)
            },
        }
        if dtype.startswith("fp32_tc"):
            entry["big"] = _stats([r for r in mine if gflop(r) >= BIG_GFLOP])
        out[dtype] = entry
    return out


def table(data: dict, worst: int = 8) -> str:
    """Per kind (rows) and dtype (columns): geomean % of torch.matmul and the
    count below 90%; the overall lines; each dtype's worst products; every
    wrong or failed result."""
    s, records = data["summary"], data["records"]
    dtypes = list(s)
    kinds = [k for k in KINDS if any(k in s[d]["kinds"] for d in dtypes)]
    head = f"{'kind':12s} " + " ".join(f"{d + ' (<90%/n)':>22s}" for d in dtypes)
    lines = [
        "geometric mean of % of torch.matmul (fp32, fp32_tc: of cuBLAS SGEMM, TF32 off), and how many "
        "products are below 90%",
        head,
        "-" * len(head),
    ]

    def cell(e):
        if not e or not e["products"]:
            return f"{'-':>22s}"
        return f"{_fmt(e['geomean_pct'], '.1f%')} ({e['below_90']}/{e['products']})".rjust(22)

    for k in kinds:
        lines.append(f"{k:12s} " + " ".join(cell(s[d]["kinds"].get(k)) for d in dtypes))
    lines.append(f"{'all':12s} " + " ".join(cell(s[d]["all"]) for d in dtypes))
    lines.append("")
    for d in dtypes:
        a = s[d]["all"]
        lines.append(
            f"{d:8s} geomean {_fmt(a['geomean_pct'], '.1f%')} over {a['products']} products, "
            f"{a['below_90']} below 90%; worst {_fmt(a['worst_pct'], '.1f%')} ({a['worst'] or '-'})"
            + (f"; {a['skipped']} skipped" if a["skipped"] else "")
            + (f"; {a['failed']} WRONG or failed" if a["failed"] else "")
        )
        if "big" in s[d]:
            b = s[d]["big"]
            lines.append(
                f"{'':8s} over the {b['products']} products of >= {BIG_GFLOP:g} GFLOP: geomean "
                f"{_fmt(b['geomean_pct'], '.1f%')} of SGEMM"
            )
    for d in dtypes:
        timed = sorted((r for r in records if r["dtype"] == d and r.get("pct_torch")), key=lambda r: r["pct_torch"])
        if timed:
            lines += ["", f"{d}: the {min(worst, len(timed))} slowest products"]
            lines += [
                f"  {_fmt(r['pct_torch'], '.1f%'):>7s}  {_name(r):52s} {r['tags']['kind']:11s} "
                f"{gflop(r):9.2f} GFLOP  {models.ran(r)}"
                for r in timed[:worst]
            ]
    bad = [r for r in records if r.get("ok") is False]
    if bad:
        lines += ["", f"{len(bad)} WRONG or failed (error over {models.ERROR_VS_TORCH:g}x torch's and the floor):"]
        lines += [
            f"  {r['dtype']:8s} {_name(r)}: "
            + (
                r.get("skipped")
                or f"rel err {r['rel_error']:.1e}, torch {_fmt(r['torch_rel_error'], '.1e')}, {models.ran(r)}"
            )
            for r in bad
        ]
    lines.append(
        "each figure: gemmlab.matmul(a, b, out=c) beside torch.matmul(a, b, out=c) on the same views, "
        "each run started on an idle GPU (host time included); kinds: " + ", ".join(kinds)
    )
    return "\n".join(lines)


def plot(data: dict, path) -> None:
    """% of torch.matmul against GFLOP, a panel per dtype, a marker per kind."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    records = [r for r in data["records"] if r.get("pct_torch")]
    dtypes = list(data["summary"]) or ["-"]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.5 * len(dtypes), 5), squeeze=False, sharey=False)
    markers = dict(zip(KINDS, "o^vsDPX*hdp"))
    for ax, dtype in zip(axes[0], dtypes):
        mine = [r for r in records if r["dtype"] == dtype]
        for i, kind in enumerate(KINDS):
            pts = [r for r in mine if r["tags"]["kind"] == kind]
            if pts:
                ax.scatter(
                    [gflop(r) for r in pts],
                    [r["pct_torch"] for r in pts],
                    s=16,
                    marker=markers[kind],
                    color=f"C{i}",
                    label=kind,
                    alpha=0.8,
                )
        ax.axhline(100, color="black", lw=1)
        ax.axhline(SLOW_PCT, color="red", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}%" if v in (20, 50, 70, 200, 300, 500) else ""))
        g = data["summary"].get(dtype, {}).get("all", {})
        base = "SGEMM" if dtype.startswith("fp32") else "torch.matmul"
        ax.set_title(
            f"{dtype}: geomean {_fmt(g.get('geomean_pct'), '.1f%')} of {base}, "
            f"{g.get('below_90', 0)}/{g.get('products', 0)} below 90%",
            fontsize=9,
        )
        ax.set_xlabel("GFLOP per call")
        ax.set_ylabel(f"% of {base} (same views)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    gpu = data["records"][0]["gpu"] if data["records"] else "GPU"
    products = len({(r["case"], r["batch"], r["M"], r["N"], r["K"]) for r in records})
    fig.suptitle(
        f"gemmlab.matmul beside torch.matmul on {products} products of public models and random odd sizes, {gpu}",
        fontsize=10,
    )
    savefig(fig, path)
