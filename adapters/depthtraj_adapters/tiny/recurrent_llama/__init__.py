"""A tiny random-weight Recurrent-Llama checkpoint, built from our own remote code.

:func:`build_tiny_recurrent_llama` writes a directory that loads like a real Recurrent-Llama
checkpoint (``AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`` and
``AutoTokenizer.from_pretrained(dir)``), offline, so the Recurrent-Llama adapter can be tested end
to end without the 1.4B weights. The real checkpoints use Llama-3.2's tokenizer, which is not
shipped; the tiny model takes any tokenizer directory (the demo and tests use Huginn's).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from depthtraj.adapter import RANDOM_WEIGHTS_KEY

REMOTE_CODE_FILES = ("configuration_recurrent_llama.py", "modeling_recurrent_llama.py")
"""The remote-code files copied next to ``config.json``."""

LLAMA3_ROPE_SCALING = {
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
"""The ``rope_scaling`` the Llama conversion writes for Llama-3.2 (factor 32)."""

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)


def build_tiny_recurrent_llama(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_heads: int = 4,
    num_key_value_heads: int = 2,
    n_layers_in_prelude: int = 2,
    n_layers_in_recurrent_block: int = 2,
    n_layers_in_coda: int = 2,
    intermediate_size: int | None = None,
    mean_recurrence: int = 32,
    rope_theta: float = 500_000.0,
    rope_scaling: dict | None = LLAMA3_ROPE_SCALING,
    max_position_embeddings: int = 131072,
    init_std: float | None = None,
    state_gain: float = 1.0,
) -> Path:
    """Build and save a random-weight Recurrent-Llama model with the tokenizer of
    ``tokenizer_dir``.

    The vocabulary size is the tokenizer's. Weights are drawn from ``seed`` (the global torch RNG
    is left as it was) with truncated normals whose std follows upstream's ``init_values``
    formulas at this width (``std = sqrt(2 / (5 n_embd))``), or ``init_std`` when given; the
    initial-state std is the same ``init_values['std']``, so the random state is comparable in
    size to the prelude output. ``embed_scale`` is 1 and the head is untied, as in the real
    checkpoints (whose ``init_values`` are instead Huginn's, computed at width 5280).

    Args:
        out_dir: directory to write (created; existing files are overwritten).
        tokenizer_dir: directory holding ``tokenizer.json`` and friends; its tokenizer files are
            copied into ``out_dir``.
        num_key_value_heads: key/value heads of the grouped-query attention (divides ``n_heads``).
        intermediate_size: MLP width; default ``4 n_embd`` (Llama-3.2-1B's ratio, 8192 / 2048).
        rope_scaling: the config's ``rope_scaling`` (Llama-3 scaling by default; ``None`` for
            plain rotary embeddings).
        state_gain: factor on the adapter's state columns (the weight of ``s_{t-1}`` in each
            step). At 1 the default model's label readouts settle within ~5 steps (median); at
            1.3 within ~5-15; from ~1.5 on the residual recurrence no longer converges.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`, holding ``config.json`` (with ``auto_map``),
        ``model.safetensors``, the remote-code files and the tokenizer files.
    """
    import torch
    from transformers import AutoTokenizer

    from .configuration_recurrent_llama import RavenConfig, huginn_init_values
    from .modeling_recurrent_llama import RavenForCausalLM

    if n_heads % num_key_value_heads or n_embd % n_heads:
        raise ValueError(
            f"need n_embd % n_heads == 0 and n_heads % num_key_value_heads == 0, got "
            f"n_embd={n_embd}, n_heads={n_heads}, num_key_value_heads={num_key_value_heads}"
        )
    out = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    depth = n_layers_in_prelude + n_layers_in_coda + n_layers_in_recurrent_block * mean_recurrence
    init_values = huginn_init_values(n_embd, depth)
    if init_std is not None:
        init_values.update(std=init_std, embedding=init_std)
    config = RavenConfig(
        n_embd=n_embd,
        n_heads=n_heads,
        num_key_value_heads=num_key_value_heads,
        n_layers=n_layers_in_prelude + n_layers_in_recurrent_block + n_layers_in_coda,
        vocab_size=len(tokenizer),
        tie_embeddings=False,
        intermediate_size=intermediate_size or 4 * n_embd,
        n_layers_in_recurrent_block=n_layers_in_recurrent_block,
        mean_recurrence=mean_recurrence,
        n_layers_in_prelude=n_layers_in_prelude,
        n_layers_in_coda=n_layers_in_coda,
        rope_theta=rope_theta,
        rope_scaling=dict(rope_scaling) if rope_scaling else None,
        max_position_embeddings=max_position_embeddings,
        init_values=init_values,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    config.architectures = ["RavenForCausalLM"]
    config.auto_map = {
        "AutoConfig": "configuration_recurrent_llama.RavenConfig",
        "AutoModelForCausalLM": "modeling_recurrent_llama.RavenForCausalLM",
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RavenForCausalLM(config)
    if state_gain != 1.0:
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


__all__ = ["LLAMA3_ROPE_SCALING", "REMOTE_CODE_FILES", "build_tiny_recurrent_llama"]
