"""A tiny random-weight raven (Huginn) checkpoint, built from our own remote code.

:func:`build_tiny_raven` writes a directory that loads exactly like the real
``tomg-group-umd/huginn-0125`` (``AutoModelForCausalLM.from_pretrained(dir,
trust_remote_code=True)`` and ``AutoTokenizer.from_pretrained(dir)``), offline, so the raven
adapter can be tested end to end without the 3.5B weights.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from depthtraj.adapter import RANDOM_WEIGHTS_KEY

REMOTE_CODE_FILES = ("configuration_raven.py", "modeling_raven.py")
"""The remote-code files copied next to ``config.json``."""

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)


def default_intermediate_size(n_embd: int) -> int:
    """Huginn's MLP width ratio (17920 / 5280), rounded up to a multiple of 64
    (gives exactly 17920 at ``n_embd = 5280``)."""
    return 64 * math.ceil(n_embd * 17920 / 5280 / 64)


def build_tiny_raven(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_heads: int = 4,
    n_layers_in_prelude: int = 2,
    n_layers_in_recurrent_block: int = 2,
    n_layers_in_coda: int = 2,
    intermediate_size: int | None = None,
    mean_recurrence: int = 32,
    block_size: int = 4096,
    tie_embeddings: bool = True,
    init_std: float | None = None,
    state_gain: float = 1.0,
) -> Path:
    """Build and save a random-weight raven model with the tokenizer of ``tokenizer_dir``.

    The vocabulary size is the tokenizer's (65536 for Huginn's). Weights are drawn from
    ``seed`` (the global torch RNG is left as it was) with truncated normals whose std follows
    the config's ``init_values`` (upstream's formulas: ``std = sqrt(2 / (5 n_embd))``,
    ``embed_scale = sqrt(n_embd)``), or ``init_std`` when given. The initial-state std is the same
    ``init_values['std']``, so the random state is comparable in size to the embeddings and the
    readouts visibly change from step to step.

    Args:
        out_dir: directory to write (created; existing files are overwritten).
        tokenizer_dir: directory holding ``tokenizer.json`` and friends; its tokenizer files are
            copied into ``out_dir``.
        state_gain: factor on the adapter's state columns (the weight of ``s_{t-1}`` in each
            step); > 1 slows the contraction to the fixed point (see the comment in the body).

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`, holding ``config.json`` (with ``auto_map``),
        ``model.safetensors``, the remote-code files and the tokenizer files.
    """
    import torch
    from transformers import AutoTokenizer

    from .configuration_raven import RavenConfig
    from .modeling_raven import RavenForCausalLM

    out = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = RavenConfig(
        n_embd=n_embd,
        n_heads=n_heads,
        n_layers=n_layers_in_prelude + n_layers_in_recurrent_block + n_layers_in_coda,
        block_size=block_size,
        vocab_size=len(tokenizer),
        tie_embeddings=tie_embeddings,
        intermediate_size=intermediate_size or default_intermediate_size(n_embd),
        n_layers_in_recurrent_block=n_layers_in_recurrent_block,
        mean_recurrence=mean_recurrence,
        n_layers_in_prelude=n_layers_in_prelude,
        n_layers_in_coda=n_layers_in_coda,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    if init_std is not None:
        config.init_values = {**config.init_values, "std": init_std, "embedding": init_std}
    config.architectures = ["RavenForCausalLM"]
    config.auto_map = {
        "AutoConfig": "configuration_raven.RavenConfig",
        "AutoModelForCausalLM": "modeling_raven.RavenForCausalLM",
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RavenForCausalLM(config)
    if state_gain != 1.0:
        # The adapter reads concat([state, input_embeds]); scaling its state columns sets how
        # strongly each step depends on the previous one. At 1.0 a random model contracts to
        # its fixed point within ~3 steps; near 2.0 it settles over ~10 steps, closer to the
        # real checkpoints; above ~2.3 it no longer converges.
        with torch.no_grad():
            model.transformer.adapter.weight[:, :n_embd].mul_(state_gain)
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


__all__ = ["REMOTE_CODE_FILES", "build_tiny_raven", "default_intermediate_size"]
