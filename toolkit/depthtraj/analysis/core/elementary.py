"""Branch-free ``exp`` and ``log`` for the log-sum-exp of candidate scores, written so that loops
over questions vectorise (numba/LLVM: no library call in the loop body).

``LSE(v) = top + log Σ_c exp(v_c - top)`` needs ``exp`` only on ``x = v_c - top ≤ 0`` and
``log`` only on the sum, which lies in ``[1, K]``. Both restricted domains allow a range
reduction by exact powers of two chosen with comparisons (selects) instead of the exponent bit
manipulation of a general libm, so the compiled loop is straight-line arithmetic that LLVM turns
into SIMD code. The cores are the classic fdlibm ones (Remez polynomials on a reduced argument,
ln 2 split into a high part exact in k·ln2_hi and a low correction); both are accurate to about
one unit in the last place — the same order as the platform's libm, against which the tests
compare them.

The margin ladder's LSE centre ``b_LSE = LSE(s_T) - LSE(s_t)`` (``pd:eq:centering``), evaluated at
every question-depth, takes ``LSE(s_t)`` through these two functions both in the per-trajectory
:func:`depthtraj.analysis.kernels.ladder_at` and in the vectorised store pass
:func:`~depthtraj.analysis.kernels.geometry_pass`, so the two compute bitwise the same b_LSE and
take the same pass/fail decisions. The §5 per-question interval energies
(:func:`depthtraj.analysis.energy._question_means`, laid out across questions the same way) take
their LSEs through them too. (Scalar code gains nothing from them: a libm call is as fast there,
so the once-per-trajectory ``LSE(s_T)`` and the per-trajectory §5 routines keep NumPy's
``exp``/``log``; the two agree to rounding.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["exp_nonpos", "log_ge1"]

_LN2_HI = 6.93147180369123816490e-01  # ln 2, high 32 bits: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10  # ln 2 - _LN2_HI
_INV_LN2 = 1.44269504088896338700e00
# exp: rational approximation of r (e^r + 1) / (e^r - 1) on |r| <= ln2 / 2 (fdlibm e_exp.c)
_P1 = 1.66666666666666019037e-01
_P2 = -2.77777777770155933842e-03
_P3 = 6.61375632143793436117e-05
_P4 = -1.65339022054652515390e-06
_P5 = 4.13813679705723846039e-08
# log: Remez polynomial of (log(1+f) - f + f^2/2) / s terms, s = f / (2 + f) (fdlibm e_log.c)
_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01
_SQRT_HALF = 0.70710678118654752440
#: Below this argument :func:`exp_nonpos` returns a value under 2^-63 (not e^x): a term that
#: small cannot change a sum that is at least 1 (the LSE's Σ contains e^0 = 1).
EXP_FLOOR = -44.0


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def exp_nonpos(x):
    """``e^x`` for ``EXP_FLOOR ≤ x ≤ 0`` to about 1 ulp (below the floor: some value < 2^-63).

    For the terms ``exp(v_c - top)`` of a log-sum-exp. ``x = k ln2 + r`` with ``|r| ≤ ln2/2``;
    ``e^r`` from fdlibm's rational form; the factor ``2^k`` (``-64 ≤ k ≤ 0``) applied as
    exact powers of two selected by comparisons. NaN in, NaN out.
    """
    x = max(x, EXP_FLOOR)
    k = np.floor(x * _INV_LN2 + 0.5)
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    z = r * r
    c = r - z * (_P1 + z * (_P2 + z * (_P3 + z * (_P4 + z * _P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    n = -k  # 0 <= n <= 64: y * 2^-n, one exact factor per binary digit of n
    big = n >= 64.0
    y = y * (2.0**-64 if big else 1.0)
    n = n - 64.0 if big else n
    big = n >= 32.0
    y = y * (2.0**-32 if big else 1.0)
    n = n - 32.0 if big else n
    big = n >= 16.0
    y = y * (2.0**-16 if big else 1.0)
    n = n - 16.0 if big else n
    big = n >= 8.0
    y = y * (2.0**-8 if big else 1.0)
    n = n - 8.0 if big else n
    big = n >= 4.0
    y = y * (2.0**-4 if big else 1.0)
    n = n - 4.0 if big else n
    big = n >= 2.0
    y = y * (0.25 if big else 1.0)
    n = n - 2.0 if big else n
    return y * (0.5 if n >= 1.0 else 1.0)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def log_ge1(x):
    """``log x`` for ``1 ≤ x < 2^63`` to about 1 ulp.

    For the sum ``Σ_c exp(v_c - top) ∈ [1, K]`` of a log-sum-exp. ``x = 2^k m`` with
    ``m ∈ [√½, √2)``, k found by halving in exact power-of-two steps (selects); ``log m`` from
    fdlibm's polynomial in ``s = f/(2+f)``, ``f = m - 1``. NaN in, NaN out.
    """
    k = 0.0
    big = x >= 2.0**32 * _SQRT_HALF
    x = x * (2.0**-32 if big else 1.0)
    k = k + 32.0 if big else k
    big = x >= 2.0**16 * _SQRT_HALF
    x = x * (2.0**-16 if big else 1.0)
    k = k + 16.0 if big else k
    big = x >= 2.0**8 * _SQRT_HALF
    x = x * (2.0**-8 if big else 1.0)
    k = k + 8.0 if big else k
    big = x >= 2.0**4 * _SQRT_HALF
    x = x * (2.0**-4 if big else 1.0)
    k = k + 4.0 if big else k
    big = x >= 4.0 * _SQRT_HALF
    x = x * (0.25 if big else 1.0)
    k = k + 2.0 if big else k
    big = x >= 2.0 * _SQRT_HALF
    x = x * (0.5 if big else 1.0)
    k = k + 1.0 if big else k
    f = x - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + (t2 + t1)) + k * _LN2_LO)) - f)
