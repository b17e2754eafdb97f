"""Review benchmark: contexts, selections and scores of the declared-rules engine (autheval.review.local_review,
SQL on DuckDB) for 10M (image x mechanism x regime) rows, against a straightforward pandas row-wise
implementation of the same rules on a ~100k-row sample, in one run.

1. Machine: cores, free memory, load average (the figures mean little without them).
2. Sample (default 100k rows): the SQL engine and the pandas row-wise baseline on the same inputs;
   outputs compared value for value (actions, change types, overrides, the three scores, bit for bit).
3. Scale (default 10M rows): the engine's scale path (autheval.review.local_review.write_review) in a child process
   (so the peak memory is its own) on inputs written to Parquet first: wall and CPU time, peak RSS.

Usage: python benchmarks/review.py [--rows 10000000] [--sample-rows 100000] [--skip-scale]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autheval.review import local_review as review
from autheval.review.rules import load_rules
from autheval.vocabulary import ACTIONS, RISK_LEVELS
from benchmarks.peer import machine_line
from warehouse.sql import connect, one

MECHANISMS = ("ranked readout", "nearest head", "short slate")  # the last one has 2-action slates
SITES = [
    "anterior torso",
    "head/neck",
    "lateral torso",
    "lower extremity",
    "oral/genital",
    "palms/soles",
    "posterior torso",
    "upper extremity",
    None,
]
INPUTS = ("images", "clusters", "s_gate", "proposals")


# ---------------------------------------------------------------------------------------------------
# Inputs


def make_inputs(n_images: int, seed: int = 20260706) -> dict[str, pa.Table]:
    """A synthetic cohort in the review's input contract: about 1.9 images per cluster (as in the
    reference test split), ages and sites with gaps, risk strata, gate scores, three mechanisms."""
    rng = np.random.default_rng(seed)
    ids = pc.binary_join_element_wise("IMG_", pc.cast(pa.array(np.arange(n_images)), pa.string()), "")
    cluster_of = np.cumsum(rng.random(n_images) < 0.53) - 1
    cluster_of[0] = 0
    cluster_ids = pc.binary_join_element_wise("cluster:", pc.cast(pa.array(np.maximum(cluster_of, 0)), pa.string()), "")
    age = rng.integers(0, 90, n_images).astype(float)
    age[rng.random(n_images) < 0.05] = np.nan
    site_index = rng.integers(0, len(SITES), n_images)
    sites = pa.array([SITES[i] for i in range(len(SITES))]).take(pa.array(site_index))
    risk = pa.array(list(RISK_LEVELS)).take(pa.array(rng.choice(4, n_images, p=[0.55, 0.15, 0.1, 0.2])))
    images = pa.table(
        {"image_id": ids, "age": pa.array(age, from_pandas=True), "anatomic_site": sites, "risk_stratum": risk}
    )
    clusters = pa.table({"image_id": ids, "cluster_id": cluster_ids})
    s_gate = pa.table({"image_id": ids, "s_gate": rng.random(n_images)})

    perms = np.array(list(__import__("itertools").permutations(range(4))), dtype=np.int32)  # 24 x 4
    actions = pa.array(list(ACTIONS))
    parts = []
    for mechanism in MECHANISMS:
        length = 2 if mechanism == "short slate" else 4
        chosen = perms[rng.integers(0, len(perms), n_images)][:, :length].reshape(-1)
        values = pa.DictionaryArray.from_arrays(pa.array(chosen), actions).cast(pa.string())
        slates = pa.ListArray.from_arrays(pa.array(np.arange(0, n_images * length + 1, length, dtype=np.int32)), values)
        nulls = pa.nulls(n_images, pa.float64())
        parts.append(
            pa.table(
                {
                    "mechanism": pa.array([mechanism] * n_images),
                    "image_id": ids,
                    "slate": slates,
                    "a_head": actions.take(pa.array(chosen[::length])),
                    "p_very_low": nulls,
                    "p_low": nulls,
                    "p_moderate": nulls,
                    "p_high": nulls,
                    "source": pa.array(["benchmark"] * n_images),
                }
            )
        )
    return {"images": images, "clusters": clusters, "s_gate": s_gate, "proposals": pa.concat_tables(parts)}


# ---------------------------------------------------------------------------------------------------
# The engine (timed per stage)


def run_engine(con, register) -> dict[str, float]:
    rule_file = load_rules()
    params = review.register_rules(con, rule_file)
    register(con)
    times = {}
    t0 = time.perf_counter()
    review.build_contexts(con, params)
    times["contexts"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    review.build_selections(con, params)
    times["selections"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    review.build_scores(con, params)
    times["scores + records"] = time.perf_counter() - t0
    return times


# ---------------------------------------------------------------------------------------------------
# The pandas row-wise baseline: the same rules written the obvious way, one Python call per row


def pandas_rowwise(inputs: dict[str, pa.Table]):
    import pandas as pd

    rules = load_rules().rules
    level = {a: i for i, a in enumerate(ACTIONS)}
    profiles = list(rules.profiles)
    factors = rules.private_factors

    def h12(text: str) -> int:
        return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)

    def image_profile(row) -> str:
        age, site = row["age"], row["anatomic_site"]
        if age is None or not (0 < age <= 200) or age != age:
            age_bin = None
        else:
            age_bin = "<30" if age <= 30 else "30-50" if age <= 50 else "50-70" if age <= 70 else "70+"
        if age_bin is None and site is None:
            sig = "__missing_age__|__missing_site__"
        else:
            sig = f"{age_bin or 'nan'}|{site if site is not None else '__missing_site__'}"
        return profiles[h12(sig) % len(profiles)]

    images = inputs["images"].to_pandas()
    images["anatomic_site"] = images["anatomic_site"].astype(object).where(images["anatomic_site"].notna(), None)
    images["age"] = images["age"].astype(object).where(images["age"].notna(), None)
    images["profile"] = images.apply(image_profile, axis=1)
    members = (
        inputs["clusters"]
        .to_pandas()
        .merge(images[["image_id", "profile"]], on="image_id")
        .merge(inputs["s_gate"].to_pandas(), on="image_id")
    )

    def cluster_context(group):
        counts = group["profile"].value_counts()
        top = counts.max()
        profile = sorted(counts[counts == top].index)[0]
        s = group["s_gate"].sum() / len(group)
        t1, t2, t3 = rules.proxy_bins.thresholds
        bin_ = RISK_LEVELS[3 if s > t3 else 2 if s > t2 else 1 if s > t1 else 0]
        cid = group.name

        def pick(f):
            return getattr(factors, f).levels[
                h12(f"{rules.context_seed}|{getattr(factors, f).namespace}|{cid}") % len(getattr(factors, f).levels)
            ]

        sens, burden, aversion = pick("sens"), pick("burden"), pick("aversion")
        p = rules.profiles[profile]
        floor = min(max(rules.floor.base[bin_] + rules.floor.shift[p.floor_policy], 0), 3)
        return pd.Series(
            {
                "profile": profile,
                "risk_bin": bin_,
                "burden": burden.name,
                "aversion": aversion.name,
                "capacity": level[p.capacity],
                "floor": floor,
                "w_under": p.w_under * sens.w_under,
                "w_over": ((p.w_over * sens.w_over) * burden.w_over) * aversion.w_over,
            }
        )

    contexts = members.groupby("cluster_id").apply(cluster_context, include_groups=False).reset_index()

    proposals = inputs["proposals"].to_pandas().merge(inputs["clusters"].to_pandas(), on="image_id")
    rows = proposals.merge(pd.DataFrame({"regime": review.REGIMES}), how="cross").merge(contexts, on="cluster_id")
    rows = rows.merge(images[["image_id", "risk_stratum"]], on="image_id")
    refusal, burden_rule = rules.overrides.patient_refusal, rules.overrides.patient_burden

    def select(row):
        if row["regime"] == "capacity_ceiling":
            band = [a for a in range(4) if a <= row["capacity"]]
        elif row["regime"] == "safety_floor":
            band = [a for a in range(4) if a >= row["floor"]]
        else:
            band = [a for a in range(4) if row["floor"] <= a <= row["capacity"]]
        override = None
        if row["aversion"] == refusal.level and level[refusal.removes] in band:
            band.remove(level[refusal.removes])
            override = "patient_refusal"
        if (
            row["burden"] == burden_rule.level
            and level[burden_rule.removes] in band
            and level[burden_rule.if_band_has[row["risk_bin"]]] in band
        ):
            band.remove(level[burden_rule.removes])
            override = "patient_burden"
        if not band:
            band = [level[rules.empty_band_default[row["risk_bin"]]]]
            override = "empty_band_default"
        slate = [level[a] for a in row["slate"]]
        head = level[row["a_head"]]
        admissible = [a for a in slate if a in band]
        if admissible:
            sel = admissible[0]
            change = "none" if sel == head else "down_substitution" if sel < head else "up_substitution"
        else:
            sel, change = max(band), "fallback"
        y = RISK_LEVELS.index(row["risk_stratum"])
        s_y = rules.severity[row["risk_stratum"]]

        def utility(a, w_u, w_o):
            g = a - y
            return ((-w_u) * s_y) * (-g) if g < 0 else (-w_o) * g if g > 0 else 0.0

        return pd.Series(
            {
                "a_sel": ACTIONS[sel],
                "change_type": change,
                "override": override,
                "u_local_head": utility(head, row["w_under"], row["w_over"]),
                "u_local_sel": utility(sel, row["w_under"], row["w_over"]),
                "u_global_head": utility(head, rules.global_utility.w_under, rules.global_utility.w_over),
            }
        )

    out = pd.concat([rows[["mechanism", "regime", "image_id"]], rows.apply(select, axis=1)], axis=1)
    return out


def compare(ours, baseline) -> int:
    """Rows where the engine and the baseline differ (any column; scores compared bit for bit)."""
    joined = ours.merge(
        baseline, on=["mechanism", "regime", "image_id"], suffixes=("", "_pandas"), how="outer", indicator=True
    )
    bad = joined["_merge"] != "both"
    for column in ("a_sel", "change_type", "override"):
        a, b = joined[column], joined[f"{column}_pandas"]
        bad |= ~((a == b) | (a.isna() & b.isna()))
    for column in ("u_local_head", "u_local_sel", "u_global_head"):
        a = joined[column].to_numpy(dtype=float)
        b = joined[f"{column}_pandas"].to_numpy(dtype=float)
        bad |= a.view(np.int64) != b.view(np.int64)
    return int(bad.sum())


def sample_run(rows: int) -> None:
    n_images = max(rows // (len(MECHANISMS) * len(review.REGIMES)), 1)
    inputs = make_inputs(n_images, seed=20260711)
    n_rows = n_images * len(MECHANISMS) * len(review.REGIMES)
    con = connect()
    t0 = time.perf_counter()
    times = run_engine(con, lambda c: [c.register(name, inputs[name]) for name in INPUTS])
    engine_s = time.perf_counter() - t0
    selected = con.table("selections").arrow().read_all().to_pandas()
    scored = con.table("review_scores").arrow().read_all().to_pandas()
    joined = selected[["analysis", "mechanism", "regime", "image_id", "a_sel", "change_type", "override"]].merge(
        scored[["analysis", "image_id", "u_local_head", "u_local_sel", "u_global_head"]], on=["analysis", "image_id"]
    )
    t0 = time.perf_counter()
    baseline = pandas_rowwise(inputs)
    pandas_s = time.perf_counter() - t0
    mismatches = compare(joined, baseline)
    print(
        f"sample: {n_rows:,} rows ({n_images:,} images x {len(MECHANISMS)} mechanisms x {len(review.REGIMES)} regimes)"
    )
    print(f"  SQL engine     {engine_s:7.2f} s  ({', '.join(f'{k} {v:.2f} s' for k, v in times.items())})")
    print(
        f"  pandas rowwise {pandas_s:7.2f} s  -> {pandas_s / engine_s:.0f}x slower; "
        f"extrapolated to 10M rows: {pandas_s * 1e7 / n_rows / 60:.0f} min"
    )
    print(f"  outputs differ on {mismatches} of {n_rows:,} rows (actions, change types, overrides, scores bit for bit)")


# ---------------------------------------------------------------------------------------------------
# Scale (child process)


def scale_child(folder: Path) -> None:
    """The engine's scale path (autheval.review.local_review.write_review): per-image and per-cluster tables in
    DuckDB, selections, scores and records streamed to Parquet, each read back by the next stage."""
    con = connect()
    for name in INPUTS:
        con.read_parquet(str(folder / f"{name}.parquet")).create_view(name)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    paths = review.write_review(con, folder / "out")
    total = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage1.ru_utime - usage0.ru_utime + usage1.ru_stime - usage0.ru_stime
    counts = {name: pq.ParquetFile(path).metadata.num_rows for name, path in paths.items()}
    sizes = {name: path.stat().st_size / 1e6 for name, path in paths.items()}
    t0 = time.perf_counter()
    con.table("records").write_parquet(str(folder / "out" / "records.parquet"))
    records_s = time.perf_counter() - t0
    band = one(con, "review/check_selections_band")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "total": total,
                "cpu": cpu,
                "records": records_s,
                "counts": counts,
                "sizes_mb": sizes,
                "peak_mb": peak_mb,
                "band_violations": band["violations"],
                "load": os.getloadavg()[0],
                "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
                "memory_limit": con.execute("SELECT current_setting('memory_limit')").fetchone()[0],
            }
        )
    )


def scale_run(rows: int) -> None:
    n_images = rows // (len(MECHANISMS) * len(review.REGIMES)) + 1
    with tempfile.TemporaryDirectory(prefix="autheval-review-bench-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        inputs = make_inputs(n_images)
        for name in INPUTS:
            pq.write_table(inputs[name], folder / f"{name}.parquet")
        del inputs
        prep = time.perf_counter() - t0
        # A private TMPDIR: warehouse.sql.connect spills to $TMPDIR/autheval-duckdb-spill, which
        # concurrent DuckDB processes on the machine would otherwise share (and clobber).
        env = {**os.environ, "TMPDIR": str(folder)}
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True, env=env
        )
        if done.returncode != 0:
            print(done.stderr)
            raise SystemExit(done.returncode)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    counts = result["counts"]
    print(
        f"scale: {counts['selections']:,} (image x mechanism x regime) rows, {n_images:,} images, "
        f"{counts['contexts']:,} clusters (inputs made and written in {prep:.1f} s, not timed)"
    )
    print(
        f"  contexts, selections and scores, each written as Parquet: {result['total']:.1f} s wall, "
        f"{result['cpu']:.1f} s CPU (load average {result['load']:.1f} at the end)"
    )
    print(
        "  Parquet written: "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in result["sizes_mb"].items())
        + f"; then records (the AuthEval log layout, a projection of scores): {result['records']:.1f} s"
    )
    print(
        f"  peak memory (child RSS): {result['peak_mb']:.0f} MB; DuckDB threads {result['threads']}, "
        f"memory_limit {result['memory_limit']}; empty bands: {result['band_violations']}"
    )
    goal = result["total"] < 20 and result["peak_mb"] < 2048
    print(f"  goal (under 20 s and 2 GB on 2 cores): {'met' if goal else 'NOT met'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--sample-rows", type=int, default=100_000)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        scale_child(args.child)
        return 0
    print(machine_line())
    sample_run(args.sample_rows)
    if not args.skip_scale:
        scale_run(args.rows)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
