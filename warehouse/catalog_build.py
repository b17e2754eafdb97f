"""A snapshot's DuckDB catalog file, built when the snapshot commits and served as autheval.duckdb.

Below both `warehouse.snapshots` (which commits) and `warehouse.catalog` (which reads): it knows the
files and views, not the lake, so neither imports the other to build or serve a catalog."""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePath

import duckdb
import pyarrow as pa

from warehouse.atomic import atomic_path
from warehouse.sql import fill, load_sql, quote_literal

CATALOG_NAME = "autheval.duckdb"
SNAPSHOTS = "snapshots"


def snapshot_catalog_path(root: PurePath, number: int) -> Path:
    return Path(root) / SNAPSHOTS / f"{number:08d}.duckdb"


def build_catalog(root: PurePath, manifest, number: int, keep: int, committed: list) -> Path:
    """Write snapshot `number`'s catalog (views over exactly its files, and the `lake_snapshots`
    table of the snapshots of the last `keep` runs kept with it, out of the lake's `committed` manifests) to
    snapshots/<number>.duckdb; atomic (temp file, then rename)."""
    earlier = [m for m in committed if m.snapshot < number]
    return write_catalog(
        Path(root), manifest, snapshot_catalog_path(root, number), last_runs([*earlier, manifest], keep)
    )


def last_runs(manifests: list, keep: int) -> list:
    """The manifests (in snapshot order) of the last `keep` runs among `manifests`: a run that committed
    several snapshots is one kept unit (warehouse.snapshots.LakeRun.collect_garbage keeps the same)."""
    runs: list[str] = []
    kept = []
    for m in sorted(manifests, key=lambda m: m.snapshot, reverse=True):
        if m.run_id not in runs:
            if len(runs) == keep:
                break
            runs.append(m.run_id)
        kept.append(m)
    return kept[::-1]


def write_catalog(root: PurePath, manifest, target: Path, kept: list) -> Path:
    with atomic_path(target) as tmp:
        tmp.unlink()  # DuckDB creates the file itself
        con = duckdb.connect(str(tmp))
        try:
            con.execute("SET VARIABLE autheval_lake = ?", [str(root)])  # views bind when created
            for name in sorted(manifest.tables):
                locations = "[" + ", ".join(quote_literal(rel) for rel in manifest.table_files(name)) + "]"
                # View DDL cannot take bound parameters: the name is a checked identifier and the
                # paths quoted literals (warehouse.sql.quote_*).
                con.execute(
                    fill("warehouse/catalog_view", identifiers={"table": name}, fragments={"locations": locations})
                )
            con.register(
                "snapshot_rows",
                pa.Table.from_pylist(
                    [
                        {
                            "snapshot": m.snapshot,
                            "run_id": m.run_id,
                            "parent": m.parent,
                            "committed_at": m.committed_at,
                            "software": m.software,
                            "tables": sorted(m.tables),
                            "served": m.snapshot == manifest.snapshot,
                        }
                        for m in kept
                    ],
                    schema=_SNAPSHOT_ROWS,
                ),
            )
            con.execute(load_sql("warehouse/catalog_snapshots"))
            con.unregister("snapshot_rows")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        for leftover in tmp.parent.glob(tmp.name + ".wal"):
            leftover.unlink()
    return target


_SNAPSHOT_ROWS = pa.schema(
    [
        ("snapshot", pa.int64()),
        ("run_id", pa.string()),
        ("parent", pa.int64()),
        ("committed_at", pa.string()),
        ("software", pa.string()),
        ("tables", pa.list_(pa.string())),
        ("served", pa.bool_()),
    ]
)


def link_served_catalog(root: PurePath, number: int) -> Path:
    """Serve snapshot `number`'s catalog as autheval.duckdb: a hard link renamed over the old one (a
    copy where links are not supported), so a reader opens the old catalog or the new one."""
    source = snapshot_catalog_path(root, number)
    target = Path(root) / CATALOG_NAME
    if target.exists() and source.exists() and os.path.samefile(source, target):
        return target
    with atomic_path(target) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
    return target
