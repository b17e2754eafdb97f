"""The monitor's family-wise error when hypotheses enter at different looks (issue 28, 1.1).

A deployment of 12 monthly looks: three sites from the first month, a fourth joining at month 4, a fifth at
month 7, and site-1 switching to a new model version at month 6 (its new series entering then), each site x
model version with two rules: 12 hypotheses, entering at looks 1, 4, 6 and 7. Each hypothesis's data is a
stream of standardised observations (30 per look, its sufficient statistic a Gaussian random walk) and its
anytime-valid p-value is the inverse of the two-sided normal-mixture martingale (the monitor's boundary, tuned
to the horizon), its running minimum over looks. Under the null the drift is 0; two hypotheses (the new
version's) have a drift of 0.5 standard deviations (the power). Every look of every replicate is decided by
the monitor's own correction (autheval.monitoring.monitor.adjusted_levels: Holm over the protocol's declared
family_size, a hypothesis without data counting with p = 1), an alert when the running p-value is at most the
adjusted level. Printed: the family-wise false alert rate over every look with its Monte Carlo standard error
(the goal: at most alpha + 2 SE), the power (the share of replicates where each false null alerts by the last
look), and for contrast Holm over the family counted per period (the hypotheses with data so far: the
monitor before issue 28), which loosens the level of hypotheses that enter early.

Usage: python benchmarks/monitoring_family.py [--reps 2000] [--seed 28]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALPHA, LOOKS, PER_LOOK, HORIZON = 0.05, 12, 30, 360
ENTRIES = [1, 1, 1, 1, 1, 1, 4, 4, 6, 6, 7, 7]  # the look each hypothesis enters (site-1's v2 at look 6)
DRIFTS = [0.0] * 8 + [0.5, 0.5] + [0.0] * 2  # the new version's two rules are false nulls


def _p_values(rng: np.random.Generator) -> np.ndarray:
    """[H, LOOKS]: each hypothesis's anytime p-value at each look (NaN before it enters)."""
    rho2 = (-2 * math.log(ALPHA) + math.log(-2 * math.log(ALPHA) + 1)) / HORIZON
    out = np.full((len(ENTRIES), LOOKS), np.nan)
    for h, (entry, drift) in enumerate(zip(ENTRIES, DRIFTS)):
        looks = LOOKS - entry + 1
        t = PER_LOOK * np.arange(1, looks + 1, dtype=float)
        s = np.cumsum(rng.normal(drift * PER_LOOK, math.sqrt(PER_LOOK), size=looks))
        log_m = -0.5 * np.log(t * rho2 + 1) + rho2 * s**2 / (2 * (t * rho2 + 1))
        out[h, entry - 1 :] = np.minimum(1.0, np.exp(-log_m))
    return out


def _holm_per_period(p_running: np.ndarray) -> np.ndarray:
    """Holm at each look over the hypotheses with data by then (the family counted per period)."""
    alert = np.zeros_like(p_running, bool)
    for k in range(LOOKS):
        have = np.flatnonzero(~np.isnan(p_running[:, k]))
        order = have[np.argsort(p_running[have, k], kind="stable")]
        m = len(order)
        for i, h in enumerate(order):
            if p_running[h, k] > ALPHA / (m - i):
                break
            alert[h, k] = True
    return alert


def simulate_family(reps: int = 2000, seed: int = 28, family_size: int | None = None) -> dict:
    """The family-wise false alert rate (and its Monte Carlo SE) and power of the monitor's correction over
    `reps` simulated deployments, and the family-wise rate of Holm over a family counted per period."""
    from autheval.monitoring.monitor import adjusted_levels
    from warehouse.sql import connect

    con = connect(threads=1)
    rng = np.random.default_rng(seed)
    family_size = family_size or len(ENTRIES)
    null = np.array(DRIFTS) == 0
    false_alerts = per_period = detected = 0
    for _ in range(reps):
        p = _p_values(rng)
        p_running = np.fmin.accumulate(np.where(np.isnan(p), np.inf, p), axis=1)
        p_running[np.isnan(p)] = np.nan
        h, k = np.nonzero(~np.isnan(p))
        looks = pa.table(
            {
                "hypothesis": h.astype(np.int64),
                "look": (k + 1).astype(np.int64),
                "period": pa.array([f"{x + 1:02d}" for x in k]),
                "p_value": p[h, k],
                "alpha": np.full(len(h), ALPHA),
                "tested": np.ones(len(h), bool),
            }
        )
        levels = adjusted_levels(con, looks, "holm", family_size)
        alert = np.zeros(p.shape, bool)
        lh = levels.column("hypothesis").to_numpy()
        lk = np.array([int(x) - 1 for x in levels.column("period").to_pylist()])
        alert[lh, lk] = levels.column("p_running").to_numpy() <= levels.column("alpha_adjusted").to_numpy()
        false_alerts += bool(alert[null].any())
        detected += bool(alert[~null].any(axis=1).all())
        per_period += bool(_holm_per_period(p_running)[null].any())
    fwer = false_alerts / reps
    return {
        "reps": reps,
        "fwer": fwer,
        "fwer_se": math.sqrt(max(fwer * (1 - fwer), ALPHA * (1 - ALPHA)) / reps),
        "power": detected / reps,
        "fwer_per_period_family": per_period / reps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    result = simulate_family(args.reps, args.seed)
    goal = ALPHA + 2 * result["fwer_se"]
    print(
        f"{args.reps} deployments, {len(ENTRIES)} hypotheses entering at looks {sorted(set(ENTRIES))}, {LOOKS} looks, "
        f"alpha {ALPHA}, declared family_size {len(ENTRIES)}"
    )
    print(
        f"declared family (Holm, p = 1 without data): family-wise false alerts {result['fwer']:.4f} +- "
        f"{result['fwer_se']:.4f} ({'goal met' if result['fwer'] <= goal else 'goal NOT met'}: <= {goal:.4f}); "
        f"power {result['power']:.3f}"
    )
    looser = result["fwer_per_period_family"]
    print(f"family counted per period (before issue 28): family-wise false alerts {looser:.4f}")


if __name__ == "__main__":
    main()
