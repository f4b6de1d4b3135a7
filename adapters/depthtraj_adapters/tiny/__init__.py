"""Tiny random-weight models written from scratch, one subpackage per family, for tests and
benchmarks that cannot download the real checkpoints."""

from pathlib import Path

from .ouro import OURO_TOKENIZER, build_tiny_ouro
from .raven import build_tiny_raven
from .recurrent_llama import build_tiny_recurrent_llama

HUGINN_TOKENIZER = Path(__file__).resolve().parent / "tokenizers" / "huginn-0125"
"""The real Huginn-0125 tokenizer files, shipped for the demo (see tokenizers/README.md)."""

__all__ = ["HUGINN_TOKENIZER", "OURO_TOKENIZER", "build_tiny_ouro", "build_tiny_raven", "build_tiny_recurrent_llama"]
