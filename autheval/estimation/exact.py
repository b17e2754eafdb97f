"""Small-sample rules of the estimators, in plain Python (no scipy in the core install): Student t
quantiles for the delta method, the exact (Clopper-Pearson) interval of a proportion, and the floor a
p-value cannot go below with few clusters. Where and why each is used: docs/evaluating.md, "Few clusters".

* `t_quantile(q, df)`: the q quantile of Student's t with `df` degrees of freedom (any real df > 0),
  from the regularized incomplete beta function (a continued fraction) and a safeguarded Newton
  iteration started at the Cornish-Fisher expansion; for df >= 1000 the four-term expansion itself
  (more exact there than the incomplete beta, whose log-gamma differences lose digits at large df).
  Agrees with scipy.stats.t.ppf to 1e-12 (tests/test_small_samples.py).
* `clopper_pearson(k, n, quantiles)`: the interval of a binomial proportion that inverts the two
  one-sided exact binomial tests at the quantiles' levels; closed forms for k = 0 and k = n (the case
  that matters: nothing changed, 1 - (1 - upper)^(1/n)), beta quantiles by bisection otherwise (k may
  be fractional: the cluster-equal unit's k = p * G).
* `sign_flip_floor(g)`: 2^(1 - g), the smallest two-sided p-value of an exact sign-flip
  (randomization) test over g clusters with non-zero contributions: 2 of the 2^g equally likely sign
  patterns are the most extreme. No test of "the gap is 0" that treats clusters as the independent
  units can claim more with g clusters, whatever a bootstrap's tail counts say.
"""

from __future__ import annotations

import math
from functools import lru_cache

EXPANSION_DF = 1000.0  # from here on the Cornish-Fisher expansion is the quantile (measured error < 1e-12)
_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def beta_inc(a: float, b: float, x: float, y: float | None = None) -> float:
    """The regularized incomplete beta function I_x(a, b); `y` = 1 - x where the caller knows it more
    exactly than 1 - x."""
    y = 1.0 - x if y is None else y
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, y) / b


def _t_upper_tail(x: float, df: float) -> float:
    """P(T > x) for x >= 0."""
    x2 = x * x
    return 0.5 * beta_inc(df / 2.0, 0.5, df / (df + x2), x2 / (df + x2))


def _t_pdf(x: float, df: float) -> float:
    return math.exp(
        math.lgamma((df + 1.0) / 2.0)
        - math.lgamma(df / 2.0)
        - 0.5 * math.log(df * math.pi)
        - (df + 1.0) / 2.0 * math.log1p(x * x / df)
    )


def _cornish_fisher(z: float, df: float) -> float:
    """Abramowitz & Stegun 26.7.5: t quantile from the normal quantile z, four terms."""
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """The q quantile of Student's t with df degrees of freedom (0 < q < 1, df > 0)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a t quantile needs 0 < q < 1, got {q!r}")
    if not df > 0.0 or math.isinf(df):
        raise ValueError(f"a t quantile needs finite degrees of freedom > 0, got {df!r}")
    if q == 0.5:
        return 0.0
    tail = min(q, 1.0 - q)
    sign = 1.0 if q > 0.5 else -1.0
    if df == 1.0:
        return sign / math.tan(math.pi * tail)
    if df == 2.0:
        return sign * (1.0 - 2.0 * tail) / math.sqrt(2.0 * tail * (1.0 - tail))
    from statistics import NormalDist  # here: the module costs every command's start

    start = _cornish_fisher(-NormalDist().inv_cdf(tail), df)
    if df >= EXPANSION_DF:
        return sign * start
    lo, hi = 0.0, max(start, 1.0)
    while _t_upper_tail(hi, df) > tail:  # bracket the root: P(T > lo) > tail >= P(T > hi)
        lo, hi = hi, hi * 2.0
    x = min(max(start, lo), hi)
    for _ in range(200):
        excess = _t_upper_tail(x, df) - tail
        if excess > 0.0:
            lo = x
        else:
            hi = x
        step = excess / _t_pdf(x, df)  # Newton on P(T > x) - tail (its derivative is -pdf)
        nxt = x + step
        if not lo < nxt < hi:  # leaves the bracket: bisect
            nxt = 0.5 * (lo + hi)
        if abs(nxt - x) <= 1e-15 * max(1.0, abs(x)) or hi - lo <= 4e-16 * hi:
            x = nxt
            break
        x = nxt
    return sign * x


def beta_quantile(p: float, a: float, b: float) -> float:
    """The p quantile of Beta(a, b) (a, b > 0), by bisection on I_x(a, b) to double precision."""
    lo, hi = 0.0, 1.0
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if beta_inc(a, b, mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson(k: float, n: float, quantiles: tuple[float, float]) -> tuple[float, float]:
    """The exact interval of a proportion with k successes in n trials: its lower end the `lower`
    quantile of Beta(k, n - k + 1), its upper end the `upper` quantile of Beta(k + 1, n - k) (0 and 1
    where k = 0 or k = n)."""
    lower, upper = quantiles
    if not 0.0 <= lower < upper <= 1.0:
        raise ValueError("quantiles must satisfy 0 <= lower < upper <= 1")
    if not n > 0 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n > 0, got k={k!r}, n={n!r}")
    if k == 0:
        lo = 0.0
    elif k == n:
        lo = lower ** (1.0 / n)
    else:
        lo = beta_quantile(lower, k, n - k + 1.0) if lower > 0.0 else 0.0
    if k == n:
        hi = 1.0
    elif k == 0:
        hi = 1.0 - (1.0 - upper) ** (1.0 / n)
    else:
        hi = beta_quantile(upper, k + 1.0, n - k) if upper < 1.0 else 1.0
    return lo, hi


def sign_flip_floor(clusters: int) -> float:
    """2^(1 - g), at most 1: the smallest two-sided p-value an exact sign-flip test over g clusters can
    give (1 for g <= 1: no test at all)."""
    return 1.0 if clusters <= 1 else math.ldexp(1.0, 1 - int(clusters))
