"""Pydantic models of the store attributes, one module per format version."""

from . import v1

__all__ = ["v1"]
