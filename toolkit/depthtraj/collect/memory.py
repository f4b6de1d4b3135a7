"""``--batch-size auto`` under padded batching: trial forwards of the longest items against the
device's memory."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..models.v1 import (
    PrecisionArm,
)
from ..store import QuestionSet
from .questions import Item
from .requests import CollectError

AUTO_BATCH_CAP = 256
"""The largest batch ``--batch-size auto`` tries."""

AUTO_MEMORY_FRACTION = 0.85
"""``--batch-size auto`` keeps a batch's peak memory under this fraction of the device's (GPU:
total memory; CPU: the process's resident memory plus what the system has available)."""

class PeakMemory:
    """Peak memory (bytes) of the work between :meth:`reset` and :meth:`peak`, and the budget.

    CUDA: the allocator's peak (``torch.cuda.max_memory_allocated``) against
    :data:`AUTO_MEMORY_FRACTION` of the device's total memory. CPU (Linux): the process's peak
    resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) against the same fraction of
    the current resident set plus ``MemAvailable``. ``available`` is False where neither can be
    read (other platforms)."""

    def __init__(self, device) -> None:
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            total = torch.cuda.get_device_properties(self.device).total_memory
            self.budget = AUTO_MEMORY_FRACTION * total
            self.available = True
            return
        try:
            rss = self._status("VmRSS")
            with open("/proc/meminfo") as f:
                avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.budget = AUTO_MEMORY_FRACTION * (rss + avail)
            self.available = True
        except (OSError, StopIteration, ValueError):
            self.budget, self.available = float("inf"), False

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    def reset(self) -> None:
        """Start a measurement: on CUDA synchronise, empty the allocator's cache and reset its peak
        statistics; on CPU reset the process's peak resident set (``VmHWM``, through
        ``/proc/self/clear_refs``); nothing where memory cannot be read."""
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.available:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    def peak(self) -> float:
        """The peak memory in bytes since :meth:`reset`: on CUDA the allocator's peak allocation
        (after a synchronise), on CPU the process's peak resident set (``VmHWM``); 0.0 where memory
        cannot be read."""
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            return float(torch.cuda.max_memory_allocated(self.device))
        return float(self._status("VmHWM")) if self.available else 0.0

def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())

def auto_batch_size(runner, items: Sequence[Item], qs: QuestionSet, depths: int,
                    arms: Sequence[PrecisionArm], readout: str, *, cap: int = AUTO_BATCH_CAP,
                    log: Callable[[str], None] | None = None) -> int:
    """``--batch-size auto``: the largest power of two ``b <= cap`` whose padded forward fits.

    Invariant batching runs one item per forward, so it returns 1 (no search). Padded batching
    runs trial forwards (two recurrence steps, readouts included) of the ``b`` longest items of
    the run, in the arm with the widest arithmetic, for ``b = 1, 2, 4, ...``: on CUDA until a
    batch runs out of memory or its peak passes :data:`AUTO_MEMORY_FRACTION` of the device's
    memory; on a CPU the peak resident memory of ``b = 1`` and ``b = 2`` gives the memory per
    item, and ``b`` is the largest power of two whose extrapolated peak fits (no trial at large
    ``b``: a CPU has no out-of-memory error to catch). The memory of a forward does not grow
    with the number of steps (states are overwritten), so two steps measure it. Logs the choice.

    Raises:
        CollectError: not even one item fits.
    """
    log = log or (lambda msg: None)
    if getattr(runner, "batching", "invariant") == "invariant" or not items:
        return 1
    cap = max(1, int(cap))
    longest = sorted(range(len(items)), key=lambda i: -items[i].length)
    arm = max(arms, key=lambda a: (_dtype_bytes(a.recurrence_dtype), _dtype_bytes(a.head_dtype)))
    meter = PeakMemory(runner.device)
    steps = min(2, depths)

    def trial(b: int) -> float:
        batch = [items[longest[i % len(longest)]] for i in range(b)]
        seeds = [qs.seed[it.q] for it in batch]
        meter.reset()
        if readout == "label":
            runner.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, steps, arm)
        else:
            runner.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds, steps, arm)
        return meter.peak()

    best, b, peaks = 0, 1, {}
    while b <= cap:
        if not meter.cuda and len(peaks) == 2:  # CPU: extrapolate from b = 1, 2
            per_item = max(peaks[2] - peaks[1], 1.0)
            fits = int((meter.budget - peaks[1]) // per_item) + 1
            if fits >= 1:  # the largest power of two <= min(cap, fits)
                best = max(best, 1 << (min(cap, fits).bit_length() - 1))
            break
        try:
            peaks[b] = trial(b)
        except Exception as exc:
            if not _is_oom(exc):
                raise
            break
        if peaks[b] > meter.budget:
            break
        best, b = b, b * 2
    if not best:
        raise CollectError(f"--batch-size auto: not even one item fits in memory on {runner.device}")
    where = "GPU memory" if meter.cuda else ("memory" if meter.available else "memory (not measurable here: largest tried)")
    log(f"--batch-size auto: {best} items per padded forward ({where}; cap {cap})")
    return best

def _dtype_bytes(name: str) -> int:
    return {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}.get(name, 4)


__all__ = [
    "AUTO_BATCH_CAP",
    "AUTO_MEMORY_FRACTION",
    "PeakMemory",
    "auto_batch_size",
]
