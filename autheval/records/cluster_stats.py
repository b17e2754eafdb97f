"""Per-cluster sufficient statistics, computed once per record and kept beside it: in memory for a small
record (HELD_CLUSTERS), else as a Parquet file.

Every in-process estimate starts from the same per-cluster sums (sql/records/cluster_stats.sql): the bootstrap
schemes' matrix, the point estimates, the delta method and the paired contrasts' cluster check. They
are computed when the record is read (autheval.records.read.with_cluster_stats) and every later step reads them,
so a run with a bootstrap and the delta method sums its records once, not once per step.

Why partitions: the sums must be added on one DuckDB thread (the same rows, the same bits;
warehouse.sql.connect), and one thread summing 10^7 clusters of 10^8 records spilled its hash table and
was slow. Cut into ranges of cluster ids of about PARTITION_CLUSTERS clusters each (the cuts: quantiles of
a sample of the ids, taken as the record's rules are checked), each range is summed on a connection of its own
(one thread, its share of DuckDB's memory limit), the ranges side by side on the cores: each cluster's
rows are still added in the record's order by one thread, so the sums do not depend on the cuts or the
number of ranges or cores. Ranges, not a hash of the id: DuckDB skips the Parquet row groups whose id
statistics lie outside a range (a log written in cluster order is read about once in all, not once per
range), and the ranges, each sorted, give the clusters in rank order with no sort of every id (figures:
docs/benchmarks.md, "Scale").

A file lives in this process's temporary folder and goes when the last RecordSet holding it does
(or when the process exits; the folder of a process killed before its exit is removed by the next
one).
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from autheval.records.registration import register_records
from warehouse.sql import (
    available_cores,
    connect,
    load_sql,
    memory_share,
    run,
    sweep_dead_folders,
    to_parquet,
    to_table,
)

if TYPE_CHECKING:
    from autheval.records.schema import RecordSet

# Clusters per partition: its hash table fits a core's share of DuckDB's limit (a larger partition
# spilled and was many times slower; figures: docs/benchmarks.md, "Figures behind design choices").
PARTITION_CLUSTERS = 1 << 20


# A record of at most this many clusters (its estimate) keeps its statistics in memory as an Arrow table
# (about 150 bytes a cluster: 40 MB at most), not in a file: the small-log path writes nothing.
HELD_CLUSTERS = 1 << 18


class ClusterStatsFile:
    """The per-cluster statistics of one record (sql/records/cluster_stats.sql's rows in rank order): held
    in memory as `table` (a small record), or a Parquet file at `path`, removed when this object is
    collected."""

    def __init__(self, path: Path | None, n_clusters: int, partitions: int, table: pa.Table | None = None):
        self.path = path
        self.table = table
        self.n_clusters = n_clusters
        self.partitions = partitions
        if path is not None:
            weakref.finalize(self, _remove, str(path))

    def __reduce__(self):  # a private temporary file: it cannot follow the record to another process
        if self.path is None:
            return (ClusterStatsFile, (None, self.n_clusters, self.partitions, self.table))
        raise TypeError("cluster statistics are a temporary file of this process; read the record again there")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


FOLDER_PREFIX = "autheval-cluster-stats-"
_FOLDER: list[Path] = []  # this process's folder, once made


def _folder() -> Path:
    """This process's folder of statistics files (removed at exit): two processes never share one."""
    if not _FOLDER:
        root = Path(tempfile.gettempdir())
        sweep_dead_folders(root, FOLDER_PREFIX)  # the folders of killed processes
        folder = root / f"{FOLDER_PREFIX}{os.getpid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, folder, True)
        _FOLDER.append(folder)
    return _FOLDER[0]


def partition_count(clusters_estimate: int) -> int:
    """Partitions (ranges of cluster ids) for a record of about `clusters_estimate` clusters (at least one)."""
    return max(1, math.ceil(max(int(clusters_estimate), 0) * 1.25 / PARTITION_CLUSTERS))


_SMALL: dict[int, object] = {}  # pid -> the database of one-partition sums (a child process opens its own)
_SMALL_LOCK = threading.Lock()


def _small_database():
    """One DuckDB database (one thread) for the records of one partition, a cursor per record:
    opening a database for each read added a fixed cost to every small record."""
    with _SMALL_LOCK:
        if os.getpid() not in _SMALL:
            _SMALL.clear()
            _SMALL[os.getpid()] = connect(threads=1)
        return _SMALL[os.getpid()]


def _workers(partitions: int) -> int:
    return max(1, min(partitions, available_cores()))


def compute(records: RecordSet, clusters_estimate: int, cluster_sample: Sequence[str] = ()) -> ClusterStatsFile:
    """Sum `records` per cluster (sql/records/cluster_sums.sql) and rank the clusters (sql/records/cluster_stats.sql)
    into a new statistics file: one partition on a cursor of one database (cheap for a small record), or
    several ranges of cluster ids (cut at the quantiles of `cluster_sample`), a connection each, side by
    side, written one after another ranked."""
    import pyarrow.parquet as pq

    partitions = partition_count(clusters_estimate)
    held = clusters_estimate <= HELD_CLUSTERS
    if held:
        table = _one_partition(records, None)
        assert table is not None  # held: the rows come back
        return ClusterStatsFile(None, table.num_rows, partitions, table)
    target = _folder() / f"stats-{uuid.uuid4().hex}.parquet"
    try:
        if partitions == 1:
            _one_partition(records, target)
        else:
            partitions = _partitioned(records, partitions, target, cluster_sample)
        n_clusters = pq.ParquetFile(target).metadata.num_rows
    except BaseException:
        _remove(str(target))
        raise
    return ClusterStatsFile(target, int(n_clusters), partitions)


def _one_partition(records: RecordSet, target: Path | None) -> pa.Table | None:
    """The statistics of a record in one partition, on a cursor of the one small database: into the
    file `target`, or returned as an Arrow table where `target` is None."""
    con = _small_database().cursor()  # its own views and registrations, gone when it closes
    try:
        register_records(con, [records])
        con.sql(load_sql("records/cluster_sums")).create_view("cluster_sums")
        if target is None:
            return run(con, "records/cluster_stats")
        to_parquet(con, "records/cluster_stats", target)
        return None
    finally:
        con.close()


def cluster_ranges(cluster_sample: Sequence[str], partitions: int) -> list[tuple[str | None, str | None]]:
    """At most `partitions` ranges [lower, upper) of cluster ids (None: unbounded), in order, that
    cover every id: cut at the quantiles of `cluster_sample`'s distinct ids (a sample of the record's
    rows, records/records_check.sql; fewer ranges where it has fewer distinct ids). Distinct ids, not
    rows, so that many small clusters beside a few large ones still spread over the ranges. The cuts
    decide only which connection sums a cluster, never its bits."""
    sample = sorted(set(cluster_sample))  # code point order: UTF-8's byte order, DuckDB's
    cuts: list[str] = []
    for k in range(1, partitions):
        cut = sample[k * len(sample) // partitions] if sample else None
        if cut is not None and cut > sample[0] and (not cuts or cut > cuts[-1]):
            cuts.append(cut)
    bounds: list[str | None] = [None, *cuts, None]
    return list(zip(bounds[:-1], bounds[1:]))


def _partitioned(records: RecordSet, partitions: int, target: Path, cluster_sample: Sequence[str]) -> int:
    """The sums of each range of cluster ids (cluster_ranges) on min(ranges, cores) threads, a
    connection of one DuckDB thread each with its share of DuckDB's limit, each range sorted by id into
    a file of a private folder (removed after); then the ranges in order, ranked, into `target`. Returns
    the number of ranges."""
    ranges = cluster_ranges(cluster_sample, partitions)
    workers = _workers(len(ranges))
    work = _folder() / f"sums-{uuid.uuid4().hex}"
    work.mkdir(mode=0o700)
    sums = {"sums": load_sql("records/cluster_sums")}
    try:

        def one(numbered: tuple[int, tuple[str | None, str | None]]) -> Path:
            number, (lower, upper) = numbered
            part = work / f"part-{number:05d}.parquet"
            con = connect(memory_limit=memory_share(workers), threads=1)
            try:
                register_records(con, [records], name="records_in_ranges")
                to_parquet(con, "records/cluster_sums_range", part, {"lower": lower, "upper": upper}, sums)
            finally:
                con.close()
            return part

        if workers == 1:
            parts = [one(r) for r in enumerate(ranges)]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="autheval-cluster-sums") as pool:
                parts = list(pool.map(one, enumerate(ranges)))
        write_ranked(parts, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return len(ranges)


class StatsFileError(OSError):
    """The statistics file could not be written (a full or read-only temporary folder)."""


def write_ranked(parts: Sequence[Path], target: Path) -> None:
    """The sorted sums of consecutive ranges (`parts`, in order) as one statistics file in
    sql/records/cluster_stats.sql's columns: each cluster's rank is its place in that order (the ids are
    byte-ordered within a range and the ranges follow each other), n_clusters their count."""
    import numpy as np
    import pyarrow.parquet as pq

    n_clusters = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    writer = None
    try:
        rank = 0
        for part in parts:
            sums = pq.read_table(part)
            n = sums.num_rows
            ranks = pa.array(np.arange(rank, rank + n, dtype=np.int32))
            counts = pa.array(np.full(n, n_clusters, dtype=np.int32))
            ranked = pa.table(
                {
                    "analysis": sums.column("analysis"),
                    "cluster_id": sums.column("cluster_id"),
                    "cluster_rank": ranks,
                    "n_clusters": counts,
                    **{name: sums.column(name) for name in sums.column_names[2:]},
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(target, ranked.schema)
            writer.write_table(ranked)
            rank += n
        if writer is not None:
            writer.close()
    except OSError as err:
        if writer is not None:
            writer.close()
        raise StatsFileError(err.errno, str(err)) from err


def create_cluster_stats(con, name: str = "cluster_stats") -> None:
    """The statistics of the `records` already on `con` as its table `name`, in one partition on
    `con`'s own threads (records cut on a connection, such as the monitoring looks'; one DuckDB thread
    on `con` for the same bits)."""
    to_table(con, "cluster_sums", "records/cluster_sums")
    to_table(con, name, "records/cluster_stats")  # beside its input, the table cluster_sums


def register_cluster_stats(con, recordsets: Sequence[RecordSet], name: str = "cluster_stats") -> None:
    """Make the statistics of `recordsets` readable as the view `name` on `con` (the tables held, the
    files read where they lie, in the order of `recordsets`; each record's rows carry its analysis label)."""
    stats = []
    for r in recordsets:
        assert r.cluster_stats is not None  # summed when the records were read (records.read.with_cluster_stats)
        stats.append(r.cluster_stats)
    if all(s.table is not None for s in stats):
        con.register(name, pa.concat_tables([s.table for s in stats]))
        return
    if all(s.table is None for s in stats):
        con.read_parquet([str(s.path) for s in stats]).create_view(name)
        return
    relations = []  # some held, some in files: one relation each, in order
    for i, s in enumerate(stats):
        if s.table is None:
            relations.append(con.read_parquet(str(s.path)))
        else:
            con.register(f"{name}_held_{i}", s.table)
            relations.append(con.table(f"{name}_held_{i}"))
    union = relations[0]
    for other in relations[1:]:
        union = union.union(other)
    union.create_view(name)
