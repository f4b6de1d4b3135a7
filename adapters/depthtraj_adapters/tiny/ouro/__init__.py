"""A tiny random-weight Ouro checkpoint, built from our own remote code.

:func:`build_tiny_ouro` writes a directory that loads exactly like the real
``ByteDance/Ouro-1.4B`` (``AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)``
and ``AutoTokenizer.from_pretrained(dir)``), offline, so the Ouro adapter can be tested end to
end without the 1.4B weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from depthtraj.adapter import RANDOM_WEIGHTS_KEY

OURO_TOKENIZER = Path(__file__).resolve().parent.parent / "tokenizers" / "Ouro-1.4B"
"""The real Ouro-1.4B tokenizer files, shipped for the demo and the tests (see its README.md)."""

REMOTE_CODE_FILES = ("configuration_ouro.py", "modeling_ouro.py")
"""The remote-code files copied next to ``config.json``."""

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)


def default_intermediate_size(hidden_size: int) -> int:
    """Ouro-1.4B's MLP width ratio (5632 / 2048 = 2.75), rounded up to a multiple of 16
    (gives exactly 5632 at ``hidden_size = 2048``)."""
    return 16 * -(-hidden_size * 5632 // (2048 * 16))


def build_tiny_ouro(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int | None = None,
    intermediate_size: int | None = None,
    total_ut_steps: int = 4,
    early_exit_threshold: float = 1.0,
    rope_theta: float = 1_000_000.0,
    max_position_embeddings: int = 65536,
    initializer_range: float = 0.02,
    tie_word_embeddings: bool = False,
) -> Path:
    """Build and save a random-weight Ouro model with the tokenizer of ``tokenizer_dir``.

    The vocabulary size is the tokenizer's (49152 for Ouro's); ``bos``/``eos``/``pad`` ids are
    the tokenizer's ``<|endoftext|>`` (id 0), as in the real config. Defaults other than the sizes
    follow the real Ouro-1.4B ``config.json`` (4 universal-transformer steps, exit threshold 1.0,
    RoPE base 1e6, untied head). Weights are drawn from ``seed`` (the global torch RNG is left as
    it was): normal(0, ``initializer_range``) matrices, zero biases, unit norm gains.

    Args:
        out_dir: directory to write (created; existing files are overwritten).
        tokenizer_dir: directory holding ``tokenizer.json`` and friends; its tokenizer files are
            copied into ``out_dir``.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`, holding ``config.json`` (with ``auto_map``),
        ``model.safetensors``, the remote-code files and the tokenizer files.
    """
    import torch
    from transformers import AutoTokenizer

    from .configuration_ouro import OuroConfig
    from .modeling_ouro import OuroForCausalLM

    out = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    special = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    config = OuroConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or default_intermediate_size(hidden_size),
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        use_cache=False,
        tie_word_embeddings=tie_word_embeddings,
        rope_theta=rope_theta,
        total_ut_steps=total_ut_steps,
        early_exit_threshold=early_exit_threshold,
        bos_token_id=special,
        eos_token_id=special,
        pad_token_id=special,
        torch_dtype="float32",
    )
    config.architectures = ["OuroForCausalLM"]
    config.auto_map = {
        "AutoConfig": "configuration_ouro.OuroConfig",
        "AutoModel": "modeling_ouro.OuroModel",
        "AutoModelForCausalLM": "modeling_ouro.OuroForCausalLM",
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = OuroForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    setattr(model.config, RANDOM_WEIGHTS_KEY, True)  # says what it is: collect records it, reports say so
    model.save_pretrained(out, safe_serialization=True)
    here = Path(__file__).parent
    for name in REMOTE_CODE_FILES:
        shutil.copyfile(here / name, out / name)
    for name in _TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)
    return out


__all__ = ["OURO_TOKENIZER", "REMOTE_CODE_FILES", "build_tiny_ouro", "default_intermediate_size"]
