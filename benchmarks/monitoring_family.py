"""The monitor's family-wise error and power when hypotheses enter at different looks (issue 28, 1.1).

Every decision here is the monitor's own: the anytime-valid p-value of each look is
sql/recurring/monitor_cs.sql then sql/recurring/monitor_cs_pvalues.sql (through
autheval.monitoring.monitor's `sequences_from_delta_method`, as `monitor_table` calls it), and the level each hypothesis
is decided at is sql/recurring/monitor_alpha_adjusted.sql (`adjusted_levels`). A hypothesis alerts at a
look when its running p-value is at most its adjusted level.

Two ways of counting the family, on the same draws:
* declared: the protocol's `family_size` m, fixed for every period, a hypothesis without data counting
  with p = 1 (the monitor since issue 28): `adjusted_levels(looks, "holm", m)` over the whole record;
* per period (the monitor before issue 28): each monthly run corrects over the hypotheses with data by
  its month and its alerts stand; the same SQL without a declared family on each month's data to date,
  the alerts of month P read at P.
A replicate whose smallest p-value is above alpha cannot alert under any correction and is not sent to
the SQL (so the declared family's figure tests the SQL, whatever it does below alpha); a month whose
smallest running p-value is above alpha over the hypotheses with data by then (Holm's first step per
period) is skipped likewise.

Scenarios (ALPHA 0.05, LOOKS monthly looks, PER_LOOK lesion clusters per series and month):
* `one per period`: 10 hypotheses, the k-th entering at look k (the issue's case);
* `deployment`: 12 looks; sites 1-3 from month 1, site-4 joining at month 4, site-5 at month 7, site-1
  switching from v1 to v2 at month 6 (v1 lands nothing after month 5); series: each site x version, site-1
  over its versions (a hypothesis from month 6, when it is no longer the same records as v1), every site
  pooled; two rules each: 16 hypotheses entering at months 1, 4, 6 and 7. A pooled series' data are its
  cells' data, so its p-values are correlated with theirs, as in the monitor.
P-values, all null:
* `monitor`: each cluster's value N(0, 1) (a cluster-equal metric, X_c = 1), the rule's lower bound 0
  (the true value on the bound: the least favourable null of a one-sided rule); the look's ratio and
  delta-method standard error are the mean and SD over the series' clusters to date (what
  sql/estimates/delta_method.sql gives for X_c = 1), then the monitor's SQL above (horizon HORIZON);
* `exact`: each hypothesis's running p-value uniform at its first look and constant after (a valid
  anytime p-value that spends all its alpha at entry: the worst case the guarantee allows, where a family
  counted per period fails most; it gives 0.138 for the issue's case, which measured 0.133).
Power (`monitor` p-values): one hypothesis, a site's new version entering at look POWER_ENTRY whose
metric lies EFFECT standard deviations (per cluster) below the bound, the declared family of m
hypotheses (the other m - 1 without data, p = 1: the power when the rest of the family is quiet):
the share of replicates that alert by the last look and the median look of the first alert.
Printed with the machine (cores, available memory, load) and the Monte Carlo standard errors:
FWER +- sqrt(f (1 - f) / n); the goal FWER <= alpha + 2 SE, SE = sqrt(alpha (1 - alpha) / n) (the
error of an estimate whose truth is alpha).

Usage: python benchmarks/monitoring_family.py [--reps 4000] [--power-reps 1000] [--seed 28]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALPHA, LOOKS, PER_LOOK, HORIZON = 0.05, 12, 30, 360
RULES = ("Delta_authority", "J_auth")  # two rules per series (independent data per rule), unit cluster_equal
POWER_ENTRY = 7  # the new version's first month in the power runs
FAMILY_SIZES = (3, 10, 30)
EFFECTS = (0.2, 0.35, 0.5)  # the new version's metric below the bound, in SDs of a cluster's value


@dataclass(frozen=True)
class Series:
    """A monitored series: the cells (site x version) it pools, and the month its hypotheses enter."""

    name: str
    cells: tuple[int, ...]
    entry: int


@dataclass(frozen=True)
class Scenario:
    name: str
    looks: int
    cell_months: tuple[tuple[int, int], ...]  # per cell: first and last month with data
    series: tuple[Series, ...]
    rules: tuple[str, ...]

    @property
    def family_size(self) -> int:
        return len(self.series) * len(self.rules)


def one_per_period(count: int = 10) -> Scenario:
    """`count` one-rule hypotheses, the k-th entering at look k, `count` looks."""
    return Scenario(
        "one per period",
        count,
        tuple((k, count) for k in range(1, count + 1)),
        tuple(Series(f"h{k}", (k - 1,), k) for k in range(1, count + 1)),
        RULES[:1],
    )


def deployment() -> Scenario:
    """Sites 1-3 from month 1, site-4 from month 4, site-5 from month 7, site-1 from v1 to v2 at month 6."""
    cells = ((1, 5), (6, 12), (1, 12), (1, 12), (4, 12), (7, 12))  # s1/v1, s1/v2, s2, s3, s4, s5
    series = (
        Series("site-1/v1", (0,), 1),
        Series("site-1/v2", (1,), 6),
        Series("site-1/all", (0, 1), 6),
        Series("site-2", (2,), 1),
        Series("site-3", (3,), 1),
        Series("site-4", (4,), 4),
        Series("site-5", (5,), 7),
        Series("all", (0, 1, 2, 3, 4, 5), 1),
    )
    return Scenario("deployment", LOOKS, cells, series, RULES)


# --- p-values ------------------------------------------------------------------------------------------


def _active(scenario: Scenario) -> np.ndarray:
    """[cells, looks]: the months each cell lands data."""
    active = np.zeros((len(scenario.cell_months), scenario.looks), bool)
    for c, (first, last) in enumerate(scenario.cell_months):
        active[c, first - 1 : last] = True
    return active


def _look_months(active: np.ndarray, series: Series) -> np.ndarray:
    """[looks]: the months a series has a look of its own (data that month, from its entry on)."""
    own = active[list(series.cells)].any(axis=0)
    own[: series.entry - 1] = False
    return own


def exact_p_values(scenario: Scenario, reps: int, rng: np.random.Generator) -> np.ndarray:
    """[reps, H, looks]: each hypothesis's p-value uniform at its first look and the same at its later
    looks (NaN: no look that month)."""
    active, r = _active(scenario), len(scenario.rules)
    out = np.full((reps, len(scenario.series) * r, scenario.looks), np.nan)
    for s, series in enumerate(scenario.series):
        own = _look_months(active, series)
        for j in range(r):
            out[:, s * r + j, own] = rng.random(reps)[:, None]
    return out


def _bounds() -> pa.Table:
    return pa.table(
        {
            "rule": [f"{m}/cluster_equal" for m in RULES],
            "unit": ["cluster_equal"] * len(RULES),
            "metric": list(RULES),
            "lower": pa.array([0.0] * len(RULES), pa.float64()),
            "upper": pa.array([None] * len(RULES), pa.float64()),
        }
    )


def monitor_p_values(con, scenario: Scenario, reps: int, rng: np.random.Generator, shift=None) -> np.ndarray:
    """[reps, H, looks] anytime p-values of every hypothesis (H = series x rules) at every month (NaN: no
    look of its own that month), by the monitor's SQL. `shift` [cells, looks]: the mean of a cluster's
    value per cell and month (default 0: the null)."""
    from autheval.monitoring.monitor import sequences_from_delta_method

    cells, looks, r = len(scenario.cell_months), scenario.looks, len(scenario.rules)
    active = _active(scenario)
    mean = np.zeros((cells, looks)) if shift is None else shift
    # per replicate, rule, cell and month: the sum and the sum of squares of PER_LOOK clusters' values
    values = rng.standard_normal((reps, r, cells, looks, PER_LOOK)) + mean[None, None, :, :, None]
    values *= active[None, None, :, :, None]
    total, squares = values.sum(axis=-1), (values**2).sum(axis=-1)
    rows = []
    out = np.full((reps, len(scenario.series) * r, looks), np.nan)
    for s, series in enumerate(scenario.series):
        members = list(series.cells)
        counts = np.cumsum(active[members].sum(axis=0) * PER_LOOK)  # clusters to date per month
        own = _look_months(active, series)
        g = counts[None, None, :].astype(float)
        s1 = np.cumsum(total[:, :, members].sum(axis=2), axis=-1)
        s2 = np.cumsum(squares[:, :, members].sum(axis=2), axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):  # months before the series has data
            estimate = s1 / g
            sigma2 = (s2 - g * estimate**2) / (g - 1)
        for k in np.flatnonzero(own):
            rows.append((s, k, estimate[:, :, k], np.sqrt(sigma2[:, :, k] / g[0, 0, k]), int(counts[k])))
    # one analysis per (replicate, series, month); both rules are metrics of it
    n = len(rows)
    analysis = (np.arange(reps)[:, None] * n + np.arange(n)[None, :]).ravel()
    con.register(
        "monitor_delta_method",
        pa.table(
            {
                "analysis": np.repeat(analysis, r),
                "unit": pa.array(["cluster_equal"] * (reps * n * r)),
                "metric": pa.array(np.tile(np.array(scenario.rules, dtype=object), reps * n).tolist()),
                "estimate": np.stack([row[2] for row in rows], axis=1).ravel(),  # [reps, n, rules]
                "std_error": np.stack([row[3] for row in rows], axis=1).ravel(),
                "n_clusters": np.tile(np.repeat([row[4] for row in rows], r), reps).astype(np.int64),
            }
        ),
    )
    try:
        table = sequences_from_delta_method(con, ALPHA, HORIZON, _bounds())
    finally:
        con.unregister("monitor_delta_method")
    a = table.column("analysis").to_numpy()
    rule = np.array(
        [scenario.rules.index(m) if m in scenario.rules else -1 for m in table.column("metric").to_pylist()]
    )
    keep = rule >= 0
    rep, index = a[keep] // n, a[keep] % n
    series = np.array([row[0] for row in rows])[index]
    month = np.array([row[1] for row in rows])[index]
    p = table.column("p_value").to_numpy(zero_copy_only=False).astype(float)[keep]
    out[rep, series * r + rule[keep], month] = np.nan_to_num(p, nan=1.0)
    return out


# --- decisions -----------------------------------------------------------------------------------------


def running(p: np.ndarray) -> np.ndarray:
    """The running minimum over looks of [..., looks] p-values (NaN before a hypothesis's first look)."""
    filled = np.fmin.accumulate(np.where(np.isnan(p), np.inf, p), axis=-1)
    return np.where(np.isinf(filled), np.nan, filled)


def _looks_table(p: np.ndarray) -> pa.Table:
    """adjusted_levels' input of one replicate's [H, looks] p-values."""
    h, k = np.nonzero(~np.isnan(p))
    return pa.table(
        {
            "hypothesis": h.astype(np.int64),
            "look": (k + 1).astype(np.int64),
            "period": pa.array([f"{x + 1:02d}" for x in k]),
            "p_value": p[h, k],
            "alpha": np.full(len(h), ALPHA),
            "tested": np.ones(len(h), bool),
        }
    )


def _alerts(levels: pa.Table, shape: tuple[int, int]) -> np.ndarray:
    """[H, looks]: p_running <= alpha_adjusted, from adjusted_levels' rows."""
    alert = np.zeros(shape, bool)
    h = levels.column("hypothesis").to_numpy()
    k = np.array([int(x) - 1 for x in levels.column("period").to_pylist()], dtype=np.int64)
    alert[h, k] = levels.column("p_running").to_numpy() <= levels.column("alpha_adjusted").to_numpy()
    return alert


def declared_alerts(con, p: np.ndarray, family_size: int) -> np.ndarray:
    """[H, looks] alerts of one replicate under the declared family (the monitor since issue 28)."""
    from autheval.monitoring.monitor import adjusted_levels

    if not np.nanmin(p, initial=np.inf) <= ALPHA:  # no correction decides at a level above alpha
        return np.zeros(p.shape, bool)
    return _alerts(adjusted_levels(con, _looks_table(p), "holm", family_size), p.shape)


def per_period_alerts(con, p: np.ndarray) -> np.ndarray:
    """[H, looks] alerts of one replicate when each monthly run corrects over the hypotheses with data by
    its month (the monitor before issue 28): month k's alerts as month k's run decided them."""
    from autheval.monitoring.monitor import adjusted_levels

    alert = np.zeros(p.shape, bool)
    p_running = running(p)
    for k in range(p.shape[1]):
        have = ~np.isnan(p_running[:, k])
        if not have.any() or not np.min(p_running[have, k]) <= ALPHA / have.sum():
            continue
        alert[:, k] = _alerts(adjusted_levels(con, _looks_table(p[:, : k + 1]), "holm"), p[:, : k + 1].shape)[:, k]
    return alert


def _p_values(con, scenario: Scenario, model: str, reps: int, rng, shift=None, chunk: int = 500):
    """Replicates' p-values of `model` ('monitor' or 'exact'), `chunk` replicates at a time."""
    for first in range(0, reps, chunk):
        n = min(chunk, reps - first)
        yield monitor_p_values(con, scenario, n, rng, shift) if model == "monitor" else exact_p_values(scenario, n, rng)


def rate(count: int, reps: int) -> dict:
    """A share with its Monte Carlo standard error."""
    f = count / reps
    return {"count": count, "rate": f, "se": math.sqrt(f * (1 - f) / reps)}


def family_wise_error(scenario: Scenario, model: str, reps: int, seed: int) -> dict:
    """The family-wise false alert rate of the declared family and of the family counted per period, on the
    same `reps` null replicates of `scenario` with `model` p-values."""
    from warehouse.sql import connect

    con = connect(threads=1)
    rng = np.random.default_rng(seed)
    declared = per_period = 0
    started = time.perf_counter()
    for p in _p_values(con, scenario, model, reps, rng):
        for one in p:
            declared += bool(declared_alerts(con, one, scenario.family_size).any())
            per_period += bool(per_period_alerts(con, one).any())
    goal = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    out = {"scenario": scenario.name, "model": model, "reps": reps, "family_size": scenario.family_size}
    out |= {"declared": rate(declared, reps), "per_period": rate(per_period, reps), "goal": goal}
    out |= {"met": declared / reps <= goal, "seconds": time.perf_counter() - started}
    return out


def power(effect: float, family_sizes=FAMILY_SIZES, reps: int = 1000, seed: int = 28) -> list[dict]:
    """Per declared family size: the share of `reps` replicates in which a new version entering at month
    POWER_ENTRY, `effect` SDs below the bound, alerts by the last look, and the looks of its first alerts
    (the same draws for every family size)."""
    from warehouse.sql import connect

    con = connect(threads=1)
    rng = np.random.default_rng(seed)
    scenario = Scenario("power", LOOKS, ((POWER_ENTRY, LOOKS),), (Series("site/v2", (0,), POWER_ENTRY),), RULES[:1])
    shift = np.zeros((1, LOOKS))
    shift[0, POWER_ENTRY - 1 :] = -effect
    first: dict[int, list[int]] = {m: [] for m in family_sizes}
    for p in _p_values(con, scenario, "monitor", reps, rng, shift):
        for one in p:
            for m in family_sizes:
                looks = np.flatnonzero(declared_alerts(con, one, m).any(axis=0))
                if looks.size:
                    first[m].append(int(looks[0]) + 1)
    return [
        {
            "effect": effect,
            "family_size": m,
            "reps": reps,
            "power": rate(len(found), reps),
            "median_look": float(np.median(found)) if found else None,
            "quartiles": tuple(float(q) for q in np.percentile(found, [25, 75])) if found else None,
        }
        for m, found in first.items()
    ]


def main() -> None:
    from benchmarks.peer import machine_line

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=4000, help="null replicates per scenario and p-value model")
    parser.add_argument("--power-reps", type=int, default=1000, help="replicates per effect size")
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    print(machine_line())
    print(
        f"alpha {ALPHA}, {PER_LOOK} clusters per series and month, horizon {HORIZON} clusters, Holm; "
        "FWER: any false alert over every look and hypothesis"
    )
    print(
        "| scenario | p-values | replicates | m | declared family: FWER +- SE | goal <= alpha + 2 SE | "
        "family per period (before): FWER +- SE | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for scenario in (one_per_period(), deployment()):
        for model in ("exact", "monitor"):
            r = family_wise_error(scenario, model, args.reps, args.seed)
            d, o = r["declared"], r["per_period"]
            print(
                f"| {r['scenario']} | {model} | {r['reps']} | {r['family_size']} | {d['rate']:.4f} +- {d['se']:.4f} "
                f"| {r['goal']:.4f}: {'met' if r['met'] else 'NOT met'} | {o['rate']:.4f} +- {o['se']:.4f} "
                f"| {r['seconds']:.0f} |",
                flush=True,
            )
    print(machine_line())
    print(
        f"power: a new version entering at month {POWER_ENTRY} of {LOOKS}, its metric EFFECT SDs (of a "
        f"cluster's value) below the bound, {PER_LOOK} clusters a month; declared family of m (the rest quiet)"
    )
    print("| effect (SD) | m | replicates | alerted by month 12 +- SE | first alert: median month (quartiles) |")
    print("|---|---|---|---|---|")
    for effect in EFFECTS:
        for r in power(effect, FAMILY_SIZES, args.power_reps, args.seed):
            q = r["quartiles"]
            when = f"{r['median_look']:.1f} ({q[0]:.0f} / {q[1]:.0f})" if q else "none"
            print(
                f"| {effect} | {r['family_size']} | {r['reps']} | {r['power']['rate']:.3f} +- "
                f"{r['power']['se']:.3f} | {when} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
