"""Per-cluster sufficient statistics, computed once per record and kept beside it as a Parquet file.

Every in-process estimate starts from the same per-cluster sums (sql/records/cluster_stats.sql): the bootstrap
schemes' matrix, the point estimates, the delta method and the paired contrasts' cluster check. They
are computed when the record is read (autheval.records.read.with_cluster_stats) and every later step reads the file,
so a run with a bootstrap and the delta method sums its records once, not once per step.

Why partitions: the sums must be added on one DuckDB thread (the same rows, the same bits;
warehouse.sql.connect), and one thread summing 10^7 clusters of 10^8 records spilled its hash table and
was slow. Split by a hash of the cluster id into partitions of about PARTITION_CLUSTERS
clusters, each partition is summed on a connection of its own (one thread, its share of DuckDB's memory
limit), the partitions side by side on the cores: each cluster's rows are still added in the record's
order by one thread, so the sums do not depend on the number of partitions or cores (figures, before and
after: docs/evaluating.md, "Large logs: records as a dataset"). The partition count is a function of the
data alone (its estimated cluster count), so the same record gives the same bytes on any machine.

The file lives in this process's temporary folder and goes when the last RecordSet holding it does
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

from autheval.records.registration import register_records
from warehouse.sql import (
    available_cores,
    connect,
    load_sql,
    memory_share,
    sweep_dead_folders,
    to_parquet,
    to_table,
    with_integers,
)

if TYPE_CHECKING:
    from autheval.records.schema import RecordSet

# Clusters per hash partition: its hash table fits a core's share of DuckDB's limit (a larger partition
# spilled and was many times slower; figures: docs/benchmarks.md, "Figures behind design choices").
PARTITION_CLUSTERS = 1 << 20


class ClusterStatsFile:
    """The per-cluster statistics of one record as a Parquet file (sql/records/cluster_stats.sql's rows in
    rank order), removed when this object is collected."""

    def __init__(self, path: Path, n_clusters: int, partitions: int):
        self.path = path
        self.n_clusters = n_clusters
        self.partitions = partitions
        weakref.finalize(self, _remove, str(path))

    def __reduce__(self):  # a private temporary file: it cannot follow the record to another process
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
    """Hash partitions for a record of about `clusters_estimate` clusters (at least one)."""
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


def compute(records: RecordSet, clusters_estimate: int) -> ClusterStatsFile:
    """Sum `records` per cluster (sql/records/cluster_sums.sql) and rank the clusters (sql/records/cluster_stats.sql)
    into a new statistics file: one partition on a cursor of one database (cheap for a small record), or
    several, a connection each, side by side, into partition files that one more connection ranks."""
    import pyarrow.parquet as pq

    partitions = partition_count(clusters_estimate)
    target = _folder() / f"stats-{uuid.uuid4().hex}.parquet"
    try:
        if partitions == 1:
            con = _small_database().cursor()  # its own views and registrations, gone when it closes
            try:
                register_records(con, [records])
                con.sql(with_integers(load_sql("records/cluster_sums"), {"partitions": 1, "partition": 0})).create_view(
                    "cluster_sums"
                )
                to_parquet(con, "records/cluster_stats", target)
            finally:
                con.close()
        else:
            _partitioned(records, partitions, target)
        n_clusters = pq.ParquetFile(target).metadata.num_rows
    except BaseException:
        _remove(str(target))
        raise
    return ClusterStatsFile(target, int(n_clusters), partitions)


def _partitioned(records: RecordSet, partitions: int, target: Path) -> None:
    """The partitions' sums on min(partitions, cores) threads, a connection of one DuckDB thread each
    with its share of DuckDB's limit, into files of a private folder (removed after); then the ranks."""
    workers = _workers(partitions)
    work = _folder() / f"sums-{uuid.uuid4().hex}"
    work.mkdir(mode=0o700)
    try:

        def one(partition: int) -> Path:
            part = work / f"part-{partition:05d}.parquet"
            con = connect(memory_limit=memory_share(workers), threads=1)
            try:
                register_records(con, [records])
                to_parquet(
                    con, "records/cluster_sums", part, integers={"partitions": partitions, "partition": partition}
                )
            finally:
                con.close()
            return part

        if workers == 1:
            parts = [one(i) for i in range(partitions)]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="autheval-cluster-sums") as pool:
                parts = list(pool.map(one, range(partitions)))
        con = connect()  # ranks are whole numbers and the sums are copied: any thread count, same bytes
        try:
            con.read_parquet([str(p) for p in parts]).create_view("cluster_sums")
            to_parquet(con, "records/cluster_stats", target)
        finally:
            con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def create_cluster_stats(con, name: str = "cluster_stats") -> None:
    """The statistics of the `records` already on `con` as its table `name`, in one partition on
    `con`'s own threads (records cut on a connection, such as the monitoring looks'; one DuckDB thread
    on `con` for the same bits)."""
    to_table(con, "cluster_sums", "records/cluster_sums", integers={"partitions": 1, "partition": 0})
    to_table(con, name, "records/cluster_stats")  # beside its input, the table cluster_sums


def register_cluster_stats(con, recordsets: Sequence[RecordSet], name: str = "cluster_stats") -> None:
    """Make the statistics of `recordsets` readable as the view `name` on `con` (their files, read
    where they lie; each record's rows carry its analysis label)."""
    files = []
    for r in recordsets:
        assert r.cluster_stats is not None  # summed when the records were read (records.read.with_cluster_stats)
        files.append(str(r.cluster_stats.path))
    con.read_parquet(files).create_view(name)
