"""The shape of a model (``ModelConfig``), with its parameter count and FLOPs per step, and
the presets every notebook names: the handouts' sizes, the leaderboard's 8B-class model and CPU
sizes of the same family. ``model`` (beside this module) builds the Transformer of such a
shape."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import pandas as pd

from perflab.implementations.attention.reference import attention_matmul_flops


@dataclass(frozen=True)
class ModelConfig:
    """Shape of one model. ``context_length`` is the longest sequence it accepts."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = 10_000
    context_length: int = 512
    rope_theta: float = 10_000.0
    #: Grouped-query attention (Ainslie et al. 2023): heads of keys and values, each shared by
    #: num_heads / num_kv_heads query heads; None: num_heads (multi-head attention).
    num_kv_heads: int | None = None

    def __post_init__(self) -> None:
        for field in ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size", "context_length"):
            if getattr(self, field) <= 0:
                raise ValueError(
                    f"ModelConfig.{field} must be positive, got {getattr(self, field)}"
                )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head dimension, got {self.head_dim}")
        kv = self.num_kv_heads
        if kv is not None and (
            isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or self.num_heads % kv
        ):
            raise ValueError(
                f"ModelConfig.num_kv_heads must be a positive divisor of num_heads "
                f"({self.num_heads}) or None, got {kv!r}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values: ``num_kv_heads``, or ``num_heads`` when it is None."""
        return self.num_kv_heads or self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values) of one token: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    def attention_weights(self) -> int:
        """Weights of one layer's attention projections: Q and the output d x d each, K and V
        d x kv_dim each (4 d^2 for multi-head attention)."""
        return 2 * self.d_model * self.d_model + 2 * self.d_model * self.kv_dim

    def as_dict(self) -> dict:
        return asdict(self)

    def num_parameters(self) -> int:
        """Trainable parameters, counted from the shapes.

        embedding V*d + per layer (``attention_weights``: 4*d*d for multi-head attention,
        + 3*d*d_ff SwiGLU + 2*d RMSNorm gains) + final RMSNorm d + LM head d*V.
        """
        d, V = self.d_model, self.vocab_size
        per_layer = self.attention_weights() + 3 * d * self.d_ff + 2 * d
        return V * d + self.num_layers * per_layer + d + d * V

    def forward_flops(self, batch_size: int, seq_len: int) -> int:
        """Matmul FLOPs of one forward pass (2 per multiply-add).

        Per layer and token: QKV and output projections 2 x ``attention_weights`` (2*4*d*d for
        multi-head attention), SwiGLU 2*3*d*d_ff; per layer
        and sequence the attention scores Q K^T and the weighted sum P V, 2*T*T*d each (the full
        square, as a dense kernel computes it, causal or not); LM head 2*d*V per token.
        Norms, softmax, rotary and elementwise work are left out: they are O(T*d) and small
        next to the matmuls (Kaplan et al. 2020, Table 1; the same convention as nanoGPT's MFU).
        """
        tokens = batch_size * seq_len
        d = self.d_model
        projections = 2 * tokens * (self.attention_weights() + 3 * d * self.d_ff)
        attention = attention_matmul_flops(batch_size, seq_len, seq_len, d)  # all heads: d wide
        lm_head = 2 * tokens * d * self.vocab_size
        return self.num_layers * (projections + attention) + lm_head

    def train_step_flops(self, batch_size: int, seq_len: int) -> int:
        """FLOPs of forward + backward: backward costs two forwards (gradients with respect to
        activations and to weights), so 3x forward; the AdamW update is O(parameters), ignored."""
        return 3 * self.forward_flops(batch_size, seq_len)


def _preset(name: str, d_model: int, d_ff: int, num_layers: int, num_heads: int) -> ModelConfig:
    return ModelConfig(name, d_model=d_model, d_ff=d_ff, num_layers=num_layers, num_heads=num_heads)


#: The 2026 handout's Table 1 (vocabulary 10,000, context 512), the 2025 handout's xl
#: ("xl-2025"), the leaderboard's 8B-class model, and CPU presets of the same family
#: (d_ff = 4 d_model, head dimension 64) small enough for a 2-core CPU.
PRESETS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        _preset("cpu-tiny", 128, 512, 2, 2),
        _preset("cpu-small", 256, 1024, 4, 4),
        _preset("cpu-medium", 384, 1536, 6, 6),
        _preset("small", 768, 3072, 12, 12),
        _preset("medium", 1024, 4096, 24, 16),
        _preset("large", 1280, 5120, 36, 20),
        _preset("xl", 2560, 10240, 32, 32),
        _preset("10B", 4608, 12288, 50, 36),
        _preset("xl-2025", 1600, 6400, 48, 25),
        ModelConfig(
            "leaderboard-8B",
            d_model=4096,
            d_ff=11008,
            num_layers=34,
            num_heads=32,
            vocab_size=151_936,
            context_length=32_768,
        ),
    )
}
#: Other names of the same shapes: the 2025 handout calls the 2026 "xl" "2.7B".
PRESET_ALIASES = {"2.7B": "xl"}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name`` (or one of its ``PRESET_ALIASES``), or a ValueError that
    lists the valid names."""
    try:
        return PRESETS[PRESET_ALIASES.get(name, name)]
    except KeyError:
        valid = ", ".join([*PRESETS, *PRESET_ALIASES])
        raise ValueError(f"unknown preset {name!r}; valid: {valid}") from None


def sized_for(config: ModelConfig, seq_len: int) -> ModelConfig:
    """``config`` with a context length of at least ``seq_len``: any context length runs, the
    rotary table being sized by the configuration."""
    if seq_len <= config.context_length:
        return config
    return replace(config, context_length=seq_len)


def presets_table(batch_size: int = 4, seq_len: int = 512) -> pd.DataFrame:
    """Every preset's shape, parameter count and FLOPs per step at ``batch_size`` x ``seq_len``."""
    rows = []
    for config in PRESETS.values():
        rows.append(
            {
                "preset": config.name,
                "d_model": config.d_model,
                "d_ff": config.d_ff,
                "layers": config.num_layers,
                "heads": config.num_heads,
                "vocab": config.vocab_size,
                "parameters_M": round(config.num_parameters() / 1e6, 2),
                "forward_GFLOP": round(config.forward_flops(batch_size, seq_len) / 1e9, 1),
                "train_step_GFLOP": round(config.train_step_flops(batch_size, seq_len) / 1e9, 1),
            }
        )
    return pd.DataFrame(rows)
