"""What every result row names: the data, the declared rules, the bootstrap, the engine, the software.

A reviewer reading one row of `estimates`, `contrasts`, `intervals`, `subgroups`, `fairness`,
`study_summary` or `trend` must be able to tell what made it without looking anywhere else, so every
such table carries the same provenance columns (PROVENANCE), stamped here in one way."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from autheval import __version__
from autheval.columns import COLUMN_TYPES

if TYPE_CHECKING:
    from autheval.review.rules import RuleFile

PROVENANCE = ("data_sha256", "rule_version", "rule_sha256", "scheme", "seed", "reps", "engine", "software_version")


@dataclass(frozen=True)
class Provenance:
    """The run-wide part of a row's provenance (the data hash is per analysis)."""

    scheme: str
    seed: int
    reps: int
    engine: str = "duckdb"
    rule_version: str | None = None  # None: the scores came with the record (a landed log), no rules applied
    rule_sha256: str | None = None
    software_version: str = f"autheval {__version__}"


def combined_sha256(hashes) -> str:
    """One data hash for a row computed from several record sets (a paired contrast, a pool)."""
    return hashlib.sha256("\n".join(sorted(h or "" for h in hashes)).encode()).hexdigest()


def stamp(
    table: pa.Table,
    provenance: Provenance,
    data_sha256: dict[str, str] | None = None,
    key: str = "analysis",
    rules: dict[str, tuple[str | None, str | None]] | None = None,
) -> pa.Table:
    """`table` with the PROVENANCE columns set (replaced where present, appended otherwise), in that
    order at its end. `data_sha256` maps the `key` column's value to its data hash, for the rows that
    do not name their own (a subgroup names its group's); `rules` maps it to (rule_version, rule_sha256) where an
    analysis's rules differ from the run's."""
    keys = table.column(key).to_pylist() if table.num_rows and key in table.column_names else [None] * table.num_rows
    default = (provenance.rule_version, provenance.rule_sha256)
    row_rules = [default if k is None else (rules or {}).get(k, default) for k in keys]
    named = table.column("data_sha256").to_pylist() if "data_sha256" in table.column_names else [None] * len(keys)
    values = {
        "data_sha256": [own or (data_sha256 or {}).get(k) for own, k in zip(named, keys)],
        "rule_version": [r[0] for r in row_rules],
        "rule_sha256": [r[1] for r in row_rules],
    }
    for name in PROVENANCE[3:]:
        values[name] = [getattr(provenance, name)] * len(keys)
    for name in PROVENANCE:
        if name in table.column_names:
            table = table.drop_columns([name])
        kind = COLUMN_TYPES[name]
        table = table.append_column(pa.field(name, kind), pa.array(values[name], kind))
    return table


def run_provenance(records: pa.Table, declared: RuleFile, engine: str, scheme: str, seed: int, reps: int):
    """The run's provenance and each analysis's rules: a reviewed cohort's records name the rules that
    scored them; the reference study's traces are the study's declared rules (the lake's
    scores_reproduced_by_declared_rules check proves it). `declared`: the run's rules, parsed once."""
    provenance = Provenance(
        scheme=scheme, seed=seed, reps=reps, engine=engine, rule_version=declared.version, rule_sha256=declared.sha256
    )
    rules: dict[str, tuple[str | None, str | None]] = {}
    if "rule_sha256" in records.column_names:
        columns = (records.column(c).to_pylist() for c in ("analysis", "rule_version", "rule_sha256"))
        for analysis, version, sha in zip(*columns):
            rules.setdefault(analysis, (version, sha))
    return provenance, rules


def analysis_names(records: pa.Table) -> dict[str, tuple[str, str]]:
    """analysis -> (mechanism, regime), from the records."""
    return dict(
        zip(
            records.column("analysis").to_pylist(),
            zip(records.column("mechanism").to_pylist(), records.column("regime").to_pylist()),
        )
    )


def with_names(table: pa.Table, names: dict[str, tuple[str, str]]) -> pa.Table:
    """`table` with `mechanism` and `regime` right after `analysis`: the join keys of every result table."""
    keys = table.column("analysis").to_pylist()
    for name in ("mechanism", "regime"):
        if name in table.column_names:
            table = table.drop_columns([name])
    at = table.column_names.index("analysis") + 1
    for offset, name in enumerate(("mechanism", "regime")):
        table = table.add_column(
            at + offset, name, pa.array([names.get(k, (None, None))[offset] for k in keys], pa.string())
        )
    return table
