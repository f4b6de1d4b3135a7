"""The errors an adapter raises: one line each, which ``collect`` turns into exit 2."""

from __future__ import annotations


class AdapterSelfCheckError(RuntimeError):
    """The adapter's per-depth readout disagrees with the model's own forward on a probe input.

    The message names the adapter (entry-point name and class), the model class and the file
    its code was loaded from, the depth and the size of the disagreement: the adapter hooks do
    not implement the model that was loaded, so nothing is collected.
    """


class AdapterInputError(ValueError):
    """An adapter refuses its input (an architecture it does not drive, a depth it does not have,
    an option file for another model); the message is one line naming the file, field or value.
    ``collect`` exits 2 with it, before loading weights where the adapter's
    :meth:`LoopedLMAdapter.preflight` can tell."""


class RevisionMismatchError(RuntimeError):
    """The checkpoint that loaded is not at the revision asked for (one-line message)."""


#: Files whose bytes make a local checkpoint's identity: weights, remote code, configs and
#: tokenizer files (:func:`checkpoint_hash`).

class TokenizerLoadError(RuntimeError):
    """:meth:`LoopedLMAdapter.load` loaded the model but not its tokenizer (``__cause__``: why)."""


__all__ = ["AdapterInputError", "AdapterSelfCheckError", "RevisionMismatchError", "TokenizerLoadError"]
