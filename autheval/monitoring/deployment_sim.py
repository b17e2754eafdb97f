"""A deployment simulator: monthly role-separated logs of a service that runs a proposer at several
sites, from a declared generative model, for tests, benchmarks and users' dry runs of monitoring.

The model (docs/monitoring.md, "The deployment simulator", says the same in words). One simulator unit
of the gap is one point of local utility per image: the unit the authority gap Delta = J_auth - J is
reported in (image-weighted). Per site s and month m:

* K lesion clusters (`clusters_per_month`); a share `recur` of them (after the first month) are
  earlier lesions of the same site seen again (same cluster_id, new images, the lesion's own traits).
  Images per cluster: 1 + Poisson(IMAGES_EXTRA).
* A new lesion draws its risk stratum (RISK_LEVELS) from the site's case mix of that month, a gap
  multiplier e ~ Gamma(CLUSTER_SHAPE) with mean 1 and a review propensity z ~ N(0, 1).
* An image is changed by the review (I = 1) when a + TAU * z + eps > 0, eps ~ N(0, 1), with
  a = Phi^-1(p) * sqrt(1 + TAU^2): so P(I = 1) is exactly the month's intervention rate p, and the
  images of one lesion are changed together more often than apart (review capacity = p).
* A changed image's gap U_proposed_local - U_executed_local is d = delta * w_y * e * g, with
  g ~ Gamma(CASE_SHAPE) of mean 1 and w_y the stratum's severity (0.5, 1, 2, 4) over its mean under the
  site's baseline mix; an unchanged image has d = 0 (same action, same score).
* delta = gap / p_base, so the expected gap per image is p * delta * E_mix[w] = `gap` under the
  baseline review and case mix. A proposer_quality drift of x adds x to `gap` (so Delta moves by exactly
  x simulator units); a review_capacity drift of x adds x to p (delta kept: Delta = p * delta moves);
  a case_mix drift of x moves a share x of the new lesions' mix to one stratum (`to`, default high).

Actions and utilities are on AuthEval's scale (spec section 4, fixed weights 1.2): the executed action
of a changed image is its stratum's level and the proposal one level off; an unchanged image's one
action is its level, or a level off with probability OFF_LEVEL. The proposal's global utility is the
fixed-weight utility of the proposed action. Everything is drawn with one numpy generator, vectorised
over deployments, sites, months and clusters: the same seed gives the same bytes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from autheval.errors import RecordError
from autheval.monitoring.deployment_flags import DEPLOYMENT_SEED, DRIFT_KINDS, DRIFT_SYNTAX, START
from autheval.vocabulary import ACTIONS, RISK_LEVELS, name_problem
from autheval.vocabulary import LOG_COLUMNS as RECORD_COLUMNS

SEVERITY = (0.5, 1.0, 2.0, 4.0)  # per risk stratum (the default rules' severity multipliers)
GLOBAL_WEIGHT = 1.2  # AuthEval's fixed-weight (global) utility: w_under = w_over = 1.2
DEFAULT_GAP = -0.10  # points of local utility per image (the example protocol's lower bound)
DEFAULT_RATE = 0.30
DEFAULT_MIX = (0.45, 0.30, 0.15, 0.10)
CLUSTER_SHAPE = 2.0  # Gamma shape of a lesion's gap multiplier (mean 1, variance 1/2)
CASE_SHAPE = 2.0  # Gamma shape of an image's gap multiplier
TAU = 0.8  # spread of a lesion's review propensity (probit scale)
IMAGES_EXTRA = 1.5  # images per cluster: 1 + Poisson(1.5), mean 2.5
RECUR = 0.10  # share of a month's clusters that are earlier lesions seen again
OFF_LEVEL = 0.15  # an unchanged image's action one level off its stratum
MAX_SITES, MAX_MONTHS, MAX_CLUSTERS = 1000, 600, 10_000_000
MAX_GAP = 100.0  # points of local utility per image, either way: AuthEval's utilities span about 15
RATE_MIN, RATE_MAX = 0.001, 0.999
# The AuthEval log schema, then where, by which model and when each case was seen
LOG_COLUMNS = (*RECORD_COLUMNS, "site", "model_version", "timestamp")


@dataclass(frozen=True)
class Drift:
    """A planted change: from month `start` (1-based) on, at `site` (1-based; None = every site)."""

    site: int | None
    kind: str
    amount: float
    start: int
    to: str | None = None  # case_mix: the stratum the mix moves to
    version: str | None = None  # proposer_quality: the model version named from `start` on
    spec: str = ""


@dataclass(frozen=True)
class DeploymentModel:
    """The declared generative model (module docstring). Every site shares the baseline."""

    sites: int
    months: int
    clusters_per_month: int = 40
    gap: float = DEFAULT_GAP
    intervention_rate: float = DEFAULT_RATE
    case_mix: tuple[float, ...] = DEFAULT_MIX
    recur: float = RECUR
    model_version: str = "model-1"
    start: str = START
    drifts: tuple[Drift, ...] = field(default_factory=tuple)


def site_name(index: int) -> str:
    return f"site-{index}"


def month_label(start: str, offset: int) -> str:
    year, month = int(start[:4]), int(start[5:7]) - 1 + offset
    return f"{year + month // 12:04d}-{month % 12 + 1:02d}"


def _bad(rule: str, spec: str) -> RecordError:
    return RecordError("--drift", None, rule, f"got {spec!r}; expected {DRIFT_SYNTAX}")


def parse_drift(spec: str, sites: int, months: int) -> Drift:
    """One --drift spec, validated against the deployment's size (RecordError naming --drift)."""
    parts = spec.split(":")
    if len(parts) < 4:
        raise _bad("a drift has at least four ':'-separated fields", spec)
    target, kind, amount_text, *options = parts
    if target == "all":
        site = None
    else:
        match = re.fullmatch(r"site-([0-9]+)", target)
        if not match:
            raise _bad("the first field is a site (site-1 ... site-N) or all", spec)
        site = int(match.group(1))
        if not 1 <= site <= sites:
            raise _bad(f"{target} is not one of the {sites} sites (site-1 ... site-{sites})", spec)
    if kind not in DRIFT_KINDS:
        raise _bad(f"the kind must be one of {', '.join(DRIFT_KINDS)}", spec)
    try:
        amount = float(amount_text)
    except ValueError:
        raise _bad(f"the amount {amount_text!r} is not a number", spec) from None
    if not math.isfinite(amount):
        raise _bad("the amount must be finite", spec)
    values: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in ("from", "to", "version") or not value:
            raise _bad(f"{option!r} is not one of from=MONTH, to=STRATUM, version=NAME", spec)
        if key in values:
            raise _bad(f"{key}= is given twice", spec)
        values[key] = value
    if "from" not in values:
        raise _bad("from=MONTH is required", spec)
    if not re.fullmatch(r"[0-9]+", values["from"]) or not 1 <= int(values["from"]) <= months:
        raise _bad(f"from= must be a month from 1 to {months}", spec)
    to, version = values.get("to"), values.get("version")
    if to is not None and kind != "case_mix":
        raise _bad("to= is for case_mix drifts only", spec)
    if kind == "case_mix":
        to = to or RISK_LEVELS[-1]
        if to not in RISK_LEVELS:
            raise _bad(f"to= must be a risk stratum ({', '.join(RISK_LEVELS)})", spec)
        if not 0.0 <= amount <= 1.0:
            raise _bad("a case_mix amount is the share of the mix moved, from 0 to 1", spec)
    if version is not None and (kind != "proposer_quality" or not re.fullmatch(r"[A-Za-z0-9._+-]+", version)):
        raise _bad("version=NAME is for proposer_quality drifts, letters, digits and . _ + - only", spec)
    if version is not None and name_problem(version):
        raise _bad(f"version=: {name_problem(version)}", spec)
    if kind == "proposer_quality" and abs(amount) > MAX_GAP:
        raise _bad(f"a proposer_quality amount is at most {MAX_GAP:g} points per image either way", spec)
    return Drift(site, kind, amount, int(values["from"]), to, version, spec)


def check_model(model: DeploymentModel) -> None:
    """Refuse a model that cannot be simulated (one line naming the flag)."""
    for flag, value, top in (("--sites", model.sites, MAX_SITES), ("--months", model.months, MAX_MONTHS)):
        if not 1 <= value <= top:
            raise RecordError(flag, None, f"must be from 1 to {top}, got {value}")
    total = model.sites * model.months * model.clusters_per_month
    if model.clusters_per_month < 1 or total > MAX_CLUSTERS:
        raise RecordError(
            "--clusters-per-month",
            None,
            f"must be at least 1, with sites x months x clusters "
            f"at most {MAX_CLUSTERS:,}, got {model.clusters_per_month} ({total:,} clusters)",
        )
    if not re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])", model.start):
        raise RecordError("--start", None, f"must be a month YYYY-MM, got {model.start!r}")
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", model.model_version):
        raise RecordError("--model-version", None, "letters, digits and . _ + - only")
    refused = name_problem(model.model_version)
    if refused:  # 'all' is the pooled rows' name: landing would refuse every log
        raise RecordError("--model-version", None, refused, f"got {model.model_version!r}")
    if not (math.isfinite(model.gap) and abs(model.gap) <= MAX_GAP):
        raise RecordError("gap", None, f"must be a finite number of points per image within +-{MAX_GAP:g}")
    par = parameters(model)
    gaps = np.abs(par["gap"])
    if not (np.isfinite(gaps).all() and gaps.max() <= MAX_GAP):
        s, m = np.argwhere(~(gaps <= MAX_GAP))[0]
        raise RecordError(
            "--drift",
            None,
            f"the gap of {site_name(s + 1)} in month {m + 1} would be {par['gap'][s, m]:g}; proposer_quality "
            f"drifts must keep it within +-{MAX_GAP:g} points per image (utilities would overflow)",
        )
    rates = par["rate"]
    bad = np.argwhere((rates < RATE_MIN) | (rates > RATE_MAX))
    if len(bad):
        s, m = bad[0]
        causes = [
            d.spec for d in model.drifts if d.kind == "review_capacity" and d.site in (None, s + 1) and d.start <= m + 1
        ]
        raise RecordError(
            "--drift",
            None,
            f"the intervention rate of {site_name(s + 1)} in month {m + 1} would be "
            f"{rates[s, m]:.3f}; review_capacity drifts must keep it within ({RATE_MIN}, {RATE_MAX})",
            "from " + ", ".join(map(repr, causes)) if causes else None,
        )


def parameters(model: DeploymentModel) -> dict[str, np.ndarray]:
    """Per site x month: `gap` (the baseline-mix gap the proposer's quality gives), `rate` (p), `mix`
    (the new lesions' stratum shares) and `version` (the model version named), drifts applied in order."""
    shape = (model.sites, model.months)
    gap = np.full(shape, model.gap)
    rate = np.full(shape, model.intervention_rate)
    mix = np.broadcast_to(np.asarray(model.case_mix, float), (*shape, len(RISK_LEVELS))).copy()
    version = np.full(shape, model.model_version, dtype=object)
    for drift in model.drifts:
        rows = slice(None) if drift.site is None else slice(drift.site - 1, drift.site)
        cols = slice(drift.start - 1, None)
        if drift.kind == "proposer_quality":
            gap[rows, cols] += drift.amount
            if drift.version:
                version[rows, cols] = drift.version
        elif drift.kind == "review_capacity":
            rate[rows, cols] += drift.amount
        else:
            target = np.zeros(len(RISK_LEVELS))
            target[RISK_LEVELS.index(drift.to)] = 1.0
            mix[rows, cols] = (1 - drift.amount) * mix[rows, cols] + drift.amount * target
    return {"gap": gap, "rate": rate, "mix": mix, "version": version}


def _weights(model: DeploymentModel) -> np.ndarray:
    severity = np.asarray(SEVERITY)
    return severity / float(np.dot(model.case_mix, severity))


def truth(model: DeploymentModel) -> list[dict]:
    """The model's expected p, delta and Delta (image-weighted, simulator units) per site and month, and
    Delta to date (every month so far, weighted by expected images): what a monitor should find."""
    par, w = parameters(model), _weights(model)
    rows = []
    for s in range(model.sites):
        born = np.zeros(len(RISK_LEVELS))  # expected new lesions per stratum so far
        to_date = 0.0
        for m in range(model.months):
            new_share = 1.0 if m == 0 else 1.0 - model.recur
            present = new_share * par["mix"][s, m] + (0.0 if m == 0 else model.recur * born / born.sum())
            born = born + new_share * par["mix"][s, m]
            delta_base = par["gap"][s, m] / model.intervention_rate
            rate = par["rate"][s, m]
            gap = rate * delta_base * float(np.dot(present, w))
            to_date += gap
            rows.append(
                {
                    "site": site_name(s + 1),
                    "month": m + 1,
                    "period": month_label(model.start, m),
                    "model_version": par["version"][s, m],
                    "intervention_rate": rate,
                    "delta": gap / rate,
                    "Delta_authority": gap,
                    "Delta_authority_to_date": to_date / (m + 1),
                    "case_mix": dict(zip(RISK_LEVELS, map(float, present))),
                }
            )
    return rows


@dataclass
class Cases:
    """Simulated images as arrays (one entry per image), in (deployment, site, month, cluster) order."""

    deployment: np.ndarray
    site: np.ndarray  # 0-based
    month: np.ndarray  # 0-based
    cluster: np.ndarray  # a lesion's number, unique over deployments and sites
    stratum: np.ndarray
    proposed: np.ndarray  # action levels
    executed: np.ndarray
    u_executed: np.ndarray
    u_proposed: np.ndarray
    u_global: np.ndarray
    second: np.ndarray  # seconds into the month of the image's time stamp

    @property
    def intervened(self) -> np.ndarray:
        return self.proposed != self.executed


def _utility(ideal: np.ndarray, level: np.ndarray) -> np.ndarray:
    """AuthEval's utility with fixed weights 1.2 (spec section 4): under-escalation costs its severity."""
    g = level - ideal
    severity = np.asarray(SEVERITY)[ideal]
    return np.where(g < 0, -GLOBAL_WEIGHT * severity * -g, np.where(g > 0, -GLOBAL_WEIGHT * g, 0.0))


def simulate(model: DeploymentModel, seed: int = DEPLOYMENT_SEED, deployments: int = 1) -> Cases:
    """`deployments` independent deployments of `model` (vectorised; one generator seeded `seed`)."""
    rng = np.random.default_rng(seed)
    par, w = parameters(model), _weights(model)
    D, S, M, K = deployments, model.sites, model.months, model.clusters_per_month
    slots = D * S * M * K  # (deployment, site, month, k) in that order
    ds = np.repeat(np.arange(D * S), M * K)
    month = np.tile(np.repeat(np.arange(M), K), D * S)
    recurring = (month > 0) & (rng.random(slots) < model.recur)
    new = ~recurring
    rank = np.cumsum(new) - 1  # a new lesion's number, in slot order
    first = rank[np.arange(D * S) * M * K]  # the first new lesion of each (deployment, site)
    new_before = np.cumsum(new.reshape(D * S, M, K).sum(axis=2), axis=1) - new.reshape(D * S, M, K).sum(axis=2)
    # a recurring slot is one of the lesions its site saw in earlier months, uniformly
    pool = new_before[ds, month]
    pick = np.minimum((rng.random(slots) * pool).astype(np.int64), np.maximum(pool - 1, 0))
    lesion = np.where(new, rank, first[ds] + pick)
    n_new = int(new.sum())
    # the traits of each new lesion: stratum from its site's mix in its first month, e, z
    site_new, month_new = (ds[new] % S), month[new]
    cum = np.cumsum(par["mix"][site_new, month_new], axis=1)
    stratum_of = np.minimum((rng.random(n_new)[:, None] > cum).sum(axis=1), len(RISK_LEVELS) - 1)
    e_of = rng.gamma(CLUSTER_SHAPE, 1.0 / CLUSTER_SHAPE, n_new)
    z_of = rng.standard_normal(n_new)
    # images
    size = 1 + rng.poisson(IMAGES_EXTRA, slots)
    img_slot = np.repeat(np.arange(slots), size)
    n = len(img_slot)
    lesion_i = lesion[img_slot]
    site_i, month_i = ds[img_slot] % S, month[img_slot]
    stratum = stratum_of[lesion_i]
    probit = np.vectorize(NormalDist().inv_cdf, otypes=[float])
    a = probit(par["rate"]) * math.sqrt(1.0 + TAU**2)
    changed = a[site_i, month_i] + TAU * z_of[lesion_i] + rng.standard_normal(n) > 0
    delta = par["gap"][site_i, month_i] / model.intervention_rate
    gap = np.where(changed, delta * w[stratum] * e_of[lesion_i] * rng.gamma(CASE_SHAPE, 1.0 / CASE_SHAPE, n), 0.0)
    # actions: a changed image is executed at its level and proposed one level off; an unchanged one
    # has one action, its level or (OFF_LEVEL) a level off
    step = np.where(rng.random(n) < 0.5, -1, 1)
    off = np.clip(stratum + step, 0, len(ACTIONS) - 1)
    off = np.where(off == stratum, stratum - step, off)
    unchanged_action = np.where(rng.random(n) < OFF_LEVEL, off, stratum)
    proposed = np.where(changed, off, unchanged_action)
    executed = np.where(changed, stratum, unchanged_action)
    base = _utility(stratum, executed)
    worse = gap <= 0  # the proposal scores d below the executed action, or (a positive gap) above it
    u_executed = np.where(worse, base, base - gap)
    u_proposed = np.where(worse, base + gap, base)
    return Cases(
        deployment=ds[img_slot] // S,
        site=site_i,
        month=month_i,
        cluster=lesion_i,
        stratum=stratum,
        proposed=proposed,
        executed=executed,
        u_executed=u_executed,
        u_proposed=u_proposed,
        u_global=_utility(stratum, proposed),
        second=rng.random(n),
    )


def _days(period: str) -> int:
    year, month = int(period[:4]), int(period[5:7])
    nxt = (year + month // 12, month % 12 + 1)
    return (np.datetime64(f"{nxt[0]:04d}-{nxt[1]:02d}-01") - np.datetime64(f"{period}-01")).astype(int)


def log_tables(model: DeploymentModel, cases: Cases) -> dict[tuple[int, int], pa.Table]:
    """One log table per (site, month) of deployment 0, in the AuthEval log schema plus site,
    model_version, timestamp (and risk_stratum, the lesion's reference stratum)."""
    import pyarrow.compute as pc

    par = parameters(model)
    # images are in (deployment, site, month, cluster) order: each (site, month) of deployment 0 is a run
    keep = int(np.searchsorted(cases.deployment, 1))
    key = cases.site[:keep] * model.months + cases.month[:keep]
    bounds = np.searchsorted(key, np.arange(model.sites * model.months + 1))
    out = {}
    actions = pa.array(ACTIONS)
    strata = pa.array(RISK_LEVELS)
    for s in range(model.sites):
        for m in range(model.months):
            i = s * model.months + m
            rows = np.arange(bounds[i], bounds[i + 1])
            period, site = month_label(model.start, m), site_name(s + 1)
            seconds = np.floor(np.sort(cases.second[rows]) * _days(period) * 86400).astype("int64")
            stamps = (np.datetime64(f"{period}-01T00:00:00") + seconds.astype("timedelta64[s]")).astype(str)
            numbers = pa.array(np.arange(1, len(rows) + 1))
            out[s, m] = pa.table(
                {
                    "case_id": pc.binary_join_element_wise(
                        f"{site}-{period}-", pc.utf8_lpad(pc.cast(numbers, pa.string()), 6, "0"), ""
                    ),
                    "cluster_id": pc.binary_join_element_wise(
                        f"{site}-lesion-", pc.utf8_lpad(pc.cast(pa.array(cases.cluster[rows]), pa.string()), 7, "0"), ""
                    ),
                    "proposed_action": actions.take(pa.array(cases.proposed[rows])),
                    "executed_action": actions.take(pa.array(cases.executed[rows])),
                    "utility_executed_local": pa.array(np.round(cases.u_executed[rows], 6) + 0.0),
                    "utility_proposed_local": pa.array(np.round(cases.u_proposed[rows], 6) + 0.0),
                    "utility_proposed_global": pa.array(np.round(cases.u_global[rows], 6) + 0.0),
                    "site": pa.array([site] * len(rows), pa.string()),
                    "model_version": pa.array([par["version"][s, m]] * len(rows), pa.string()),
                    "timestamp": pa.array(list(stamps), pa.string()),
                    "risk_stratum": strata.take(pa.array(cases.stratum[rows])),
                }
            )
    return out


def model_json(model: DeploymentModel, seed: int) -> str:
    """The declared model, the seed and the truth per site and month, as the JSON written beside the logs."""
    from autheval import __version__

    declared = asdict(replace(model, drifts=()))
    declared["drifts"] = [d.spec or asdict(d) for d in model.drifts]
    declared.update(
        cluster_shape=CLUSTER_SHAPE,
        case_shape=CASE_SHAPE,
        tau=TAU,
        images_per_cluster=1 + IMAGES_EXTRA,
        off_level=OFF_LEVEL,
        severity=list(SEVERITY),
        unit="local-utility points per image",
    )
    doc = {
        "simulator": "autheval.monitoring.deployment_sim",
        "software_version": __version__,
        "seed": seed,
        "model": declared,
        "truth": truth(model),
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def write_deployment(
    model: DeploymentModel, out: Path, seed: int = DEPLOYMENT_SEED, fmt: str = "csv", overwrite: bool = False
) -> list[Path]:
    """Write one log per (site, month) as <out>/<site>_<YYYY-MM>.<csv|parquet>, and deployment.json
    (the declared model and its truth; not a log, so landing ignores it). Returns the log paths."""
    import pyarrow.parquet as pq
    from pyarrow import csv

    from warehouse.atomic import atomic_path, atomic_write_text

    check_model(model)
    names = {
        (s, m): f"{site_name(s + 1)}_{month_label(model.start, m)}.{fmt}"
        for s in range(model.sites)
        for m in range(model.months)
    }
    existing = [n for n in names.values() if (out / n).exists()]
    if existing and not overwrite:
        raise RecordError(
            "--out", None, f"{out / existing[0]} exists ({len(existing)} logs in all); add --overwrite to replace them"
        )
    cases = simulate(model, seed)
    for name in ("u_executed", "u_proposed", "u_global"):  # check_model bounds the gap; never write an inf
        if not np.isfinite(getattr(cases, name)).all():
            raise RecordError("--drift", None, f"the simulated {name} is not finite everywhere: lower the drifts")
    tables = log_tables(model, cases)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, table in tables.items():
        path = out / names[key]
        with atomic_path(path) as tmp:
            if fmt == "csv":
                csv.write_csv(table, tmp)
            else:
                pq.write_table(table, tmp, compression="zstd")
        paths.append(path)
    atomic_write_text(out / "deployment.json", model_json(model, seed))
    return paths
