"""Hypothesis strategies: small random score stores with every awkward feature of the layout.

Variable K (2-5) with NaN padding (sometimes an extra all-padding candidate column), exact
ties, integer-valued scores (exact zero bounds), float32 converging trajectories from
:func:`depthtraj.testing.synthetic_scores` (ties and pure-translation steps), sparse recorded
depths, an endpoint before the last depth, several arrangements and precision arms, sparse
or empty grids, incomplete (all-NaN) questions, questions using only their first A_q
arrangements (the rest NaN, ``arrangement_order`` rows of -1) and random question chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from depthtraj.testing import synthetic_scores


@dataclass
class Case:
    score: np.ndarray  # [question, depth, candidate, arrangement, precision]
    K: np.ndarray
    depths: list[int]
    T: int
    grid: list[int]
    chunk: int
    tasks: list[str]
    n_arr: np.ndarray | None = None  # arrangements used per question (spec §4.3); None: all

    def dataset(self):
        import xarray as xr

        n, _, c, a, p = self.score.shape
        ds = xr.Dataset(
            {"score": (("question", "depth", "candidate", "arrangement", "precision"), self.score)},
            coords={
                "question": [f"q{i}" for i in range(n)],
                "n_candidates": ("question", self.K.astype(np.int8)),
                "task": ("question", np.array(self.tasks, dtype=object)),
                "depth": np.asarray(self.depths, dtype=np.int32),
                "candidate": np.arange(c, dtype=np.int8),
                "arrangement": np.arange(a, dtype=np.int8),
                "precision": [f"arm{j}" for j in range(p)],
            },
        )
        if self.n_arr is not None:
            order = np.full((n, a, c), -1, dtype=np.int16)
            for i in range(n):
                for aa in range(int(self.n_arr[i])):
                    order[i, aa, : int(self.K[i])] = (np.arange(int(self.K[i])) + aa) % int(self.K[i])
            ds["arrangement_order"] = (("question", "arrangement", "position"), order)
        return ds.chunk({"question": self.chunk})


@st.composite
def cases(draw, max_n: int = 6) -> Case:
    n = draw(st.integers(1, max_n))
    a = draw(st.integers(1, 3))
    p = draw(st.integers(1, 2))
    k_max = draw(st.integers(2, 5))
    K = np.array(draw(st.lists(st.integers(2, k_max), min_size=n, max_size=n)))
    c = int(K.max()) + draw(st.integers(0, 1))
    t_last = draw(st.integers(2, 9))
    inner = sorted(draw(st.sets(st.integers(1, t_last - 1), max_size=t_last - 1)))
    depths = inner + [t_last]
    # the endpoint: usually the last depth, sometimes an earlier recorded one
    T = draw(st.sampled_from(depths)) if draw(st.booleans()) and len(depths) > 1 else t_last
    below = [t for t in depths if t < T]
    grid = sorted(draw(st.sets(st.sampled_from(below), max_size=len(below)))) if below else []
    if below and draw(st.booleans()):
        grid = below  # the full native grid
    mode = draw(st.sampled_from(["int", "normal", "synthetic", "hyp"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = (n, len(depths), c, a, p)
    if mode == "int":
        s = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif mode == "normal":
        s = rng.normal(0.0, 2.0, size=shape)
        ties = rng.random(shape[:2] + shape[3:]) < 0.2  # copy the top score onto another
        for i, j, aa, pp in zip(*np.nonzero(ties)):
            k = int(K[i])
            top = int(np.argmax(s[i, j, :k, aa, pp]))
            s[i, j, (top + 1) % k, aa, pp] = s[i, j, top, aa, pp]
    elif mode == "synthetic":
        s = synthetic_scores(
            K, np.asarray(depths), a, p, rng=rng, tie_rate=0.2, stall_rate=0.2,
            readout=draw(st.sampled_from(["label", "text"])), dtype="float32",
        )
        if c > s.shape[2]:
            s = np.concatenate([s, np.full(s.shape[:2] + (c - s.shape[2],) + s.shape[3:], np.nan, np.float32)], 2)
    else:
        s = draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([-1.5, -1.0, 0.0, 0.5, 1.0, 2.0]), fill=st.sampled_from([0.0, 1.0])))
    s = np.array(s, copy=True)
    for i in range(n):
        s[i, :, K[i]:] = np.nan
    if n > 1 and draw(st.booleans()):
        s[draw(st.integers(0, n - 1))] = np.nan  # an incomplete question
    tasks = [draw(st.sampled_from(["arc", "mmlu"])) for _ in range(n)]
    chunk = draw(st.integers(1, n))
    n_arr = None
    if a > 1 and draw(st.booleans()):  # questions using fewer arrangements (balanced designs per K)
        n_arr = np.array(draw(st.lists(st.integers(1, a), min_size=n, max_size=n)))
        for i in range(n):
            s[i, :, :, n_arr[i]:] = np.nan
    return Case(s, K, depths, int(T), grid, chunk, tasks, n_arr)
