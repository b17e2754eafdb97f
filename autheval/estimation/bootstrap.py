"""Replicate sums for the exact whole-cluster bootstraps, from numpy's stream.

AuthEval draws `default_rng(seed).integers(0, G, size=G)` once per replicate over clusters in
ascending cluster_id order; drawing several replicates at once yields the identical stream. A replicate's
weighted sums are its cluster multiplicities times the cluster-statistics matrix (sql/records/cluster_matrix.sql),
so a block of replicates is one dense matrix product (BLAS); the metrics, intervals and checks on the
resulting sums stay in SQL.

Where the time goes: counting the stream into multiplicities (the C extension of
autheval/estimation/compiled_stream.py, faster than numpy's `integers` + one `bincount`, which run where
it is not built: the same whole numbers; figures: docs/benchmarks.md, the inner loops of `make bench`) and
the product. Sub-blocks hold about DRAW_VALUES draws (at least PRODUCT_ROWS replicates for a block
product), so the multiplicities and the product stay in cache; from ROW_PRODUCT_CLUSTERS clusters on, a
matrix of a few columns (the evaluator scheme's) is multiplied one replicate at a time. One product over
a whole block's multiplicity buffer (64 MiB) instead was slower and used more memory
(figures: docs/benchmarks.md, "Figures behind design choices"). One stream's next sub-block is counted
on a second thread while this one is multiplied; independent streams (the `evaluator` scheme's seeds)
run on all cores at once (`stream_sums`), each counting and multiplying on its own thread. Columns that
are all 0 or all 1 are not multiplied: their sums are 0 and G exactly, as the product gives them. The
last bits of a product depend on how BLAS blocks it and on its thread count (BLAS runs on one thread
here, `one_blas_thread`), never on our threads or on timing. Products use `np.dot`, which releases the
GIL around BLAS (`@` held it: counting on one thread and multiplying on another then ran one after the
other).

Blocks bound memory: each yielded block of replicate sums holds at most BLOCK_VALUES doubles (or one
replicate's worth when a replicate is larger) and REP_BLOCK replicates, whatever the number of
replicates; `product_blocks` yields them one block at a time.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial
from typing import cast

import numpy as np

from autheval.estimation.compiled_stream import extension as compiled_extension
from autheval.estimation.compiled_stream import wanted as compiled_wanted
from warehouse.sql import available_cores

BLOCK_VALUES = 1 << 23  # doubles of replicate sums (or multiplicities) a block may hold (64 MiB)
REP_BLOCK = 1 << 16  # at most this many replicates per block (bounds what each block becomes downstream)
DRAW_VALUES = 1 << 18  # draws per sub-block: the multiplicities (2 MiB) and the product stay in cache
# From this many clusters on, a statistics matrix of at most this many columns is multiplied one
# replicate at a time (a matrix-vector product per row of multiplicities): at 100k clusters less time per
# draw than the block product of 2 replicates per sub-block, and about even with 16 (figures:
# docs/benchmarks.md, "Figures behind design choices").
ROW_PRODUCT_CLUSTERS = 1 << 15
ROW_PRODUCT_COLUMNS = 4
# A block product takes at least this many replicates (from 2^14 clusters on, where DRAW_VALUES would
# give fewer): 16 rows at 100k clusters read the (G x 16) matrix once per 16 replicates instead of per
# 2, which made the reference scheme's bootstrap faster (figures: docs/benchmarks.md, "Figures behind design
# choices"); 16 x 100k counts are 12.8 MB per block, two in flight.
PRODUCT_ROWS = 16


def one_blas_thread():
    """BLAS on one thread (a context; a no-op without threadpoolctl, where the command line sets
    OPENBLAS_NUM_THREADS=1 instead). The products are small (a sub-block of replicates times the
    statistics) and run beside our own threads: OpenBLAS's threads spinning for a core made the
    reference scheme severalfold slower on a busy machine (docs/internals.md, "How the estimators run").
    The products' values do not depend on it."""
    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        return nullcontext()  # already so (the command line), and threadpoolctl's library scan costs time
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(1, user_api="blas")


def block_rows(n_clusters: int, n_columns: int, reps: int, block_values: int | None = None) -> int:
    """Replicates per block: at most REP_BLOCK, and the multiplicities (rows x G) and the sums
    (rows x k) each stay within `block_values` doubles (at least one replicate per block)."""
    return max(1, min(reps, REP_BLOCK, (block_values or BLOCK_VALUES) // max(n_clusters, n_columns, 1)))


def stream_counts(
    seed: int, g: int, sizes: Sequence[int], prefetch: bool = False, compiled: bool | None = None
) -> Iterator[np.ndarray]:
    """The stream `seed` as consecutive (rows x G) float64 multiplicity arrays, `sizes` replicates at a
    time: compiled (autheval/estimation/compiled_stream.py; default: where it is built) or numpy's `integers` and
    one `bincount` (each row's draws offset by row * G), its fallback: the same whole numbers either
    way. The one writing of numpy's resampling stream, for the in-process products and the weights
    shipped to another engine alike. With `prefetch`, the next one is counted on another thread while
    the caller works on this one (one in flight, so the stream's order is kept; a yielded array is
    valid until the next one is asked for)."""
    if compiled is None:
        compiled = compiled_wanted(g)
    if compiled:
        from autheval.estimation.compiled_stream import CompiledStream

        stream = CompiledStream(seed, g)
        spare: dict[int, list[np.ndarray]] = {}  # two buffers per height, used in turn

        def count(rows: int) -> np.ndarray:
            pair = spare.setdefault(rows, [np.empty((rows, g)), np.empty((rows, g))])
            pair.reverse()
            return stream.counts(pair[0])
    else:
        rng = np.random.default_rng(seed)
        offsets = (np.arange(max(sizes, default=0), dtype=np.int64) * g)[:, None]

        def count(rows: int) -> np.ndarray:
            draws = rng.integers(0, g, size=(rows, g))  # int64: the dtype decides the stream
            draws += offsets[:rows]
            return np.bincount(draws.ravel(), minlength=rows * g).reshape(rows, g).astype(np.float64)

    if not prefetch or len(sizes) < 2:
        for rows in sizes:
            yield count(rows)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="autheval-draws") as pool:
        pending = pool.submit(count, sizes[0])
        for following in [*sizes[1:], None]:
            counts = pending.result()
            if following is not None:
                pending = pool.submit(count, following)
            yield counts


def product_blocks(
    seed: int, reps: int, matrix: np.ndarray, block_values: int | None = None, prefetch: bool | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first_rep, sums): sums[r] = the weighted column sums of replicate first_rep + r, i.e. the
    multiplicities of the stream `seed` times the (G x k) statistics matrix, one block at a time, so
    memory does not grow with the number of replicates. Each yielded array is new. `prefetch` (default:
    when there is more than one core) draws the next sub-block on a second thread."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    g, k = matrix.shape
    rows = block_rows(g, k, reps, block_values)
    zero = ~matrix.any(axis=0)
    one = (matrix == 1.0).all(axis=0) & ~zero
    live = np.flatnonzero(~(zero | one))
    live_matrix = np.ascontiguousarray(matrix[:, live])
    by_row = g >= ROW_PRODUCT_CLUSTERS and live.size <= ROW_PRODUCT_COLUMNS
    # sub-blocks of about DRAW_VALUES draws; a block product has at least PRODUCT_ROWS replicates, so
    # large G does not re-read the whole statistics matrix for every 2 replicates
    sub = max(1, min(rows, max(DRAW_VALUES // max(g, 1), 1 if by_row else PRODUCT_ROWS)))
    if prefetch is None:
        prefetch = available_cores() > 1
    starts = range(0, reps, rows)
    sizes = [min(sub, n - first) for n in (min(rows, reps - s) for s in starts) for first in range(0, n, sub)]
    live_rows = np.ascontiguousarray(live_matrix.T)  # (k x G): one replicate's sums are one matrix-vector product
    compiled = live.size > 0 and compiled_wanted(g)
    blocks = stream_counts(seed, g, sizes if live.size else [], prefetch, compiled)
    for start in starts:
        n = min(rows, reps - start)
        sums = np.empty((n, k), dtype=np.float64)
        sums[:, zero] = 0.0
        sums[:, one] = float(g)  # every replicate draws G clusters: the product's exact value
        first = 0
        while first < n and live.size:
            counts = next(blocks)
            r = counts.shape[0]
            if by_row:
                for i in range(r):
                    sums[first + i, live] = np.dot(live_rows, counts[i])
            else:
                sums[first : first + r, live] = np.dot(counts, live_matrix)
            first += r
        yield start, sums


def replicate_products(seed: int, reps: int, matrix: np.ndarray) -> np.ndarray:
    """(reps x k) replicate sums: multiplicities of the stream `seed` times a (G x k) statistics matrix,
    all replicates at once (for small runs and tests; the estimators stream `product_blocks`)."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    out = np.empty((reps, matrix.shape[1]), dtype=np.float64)
    for start, sums in product_blocks(seed, reps, matrix):
        out[start : start + sums.shape[0]] = sums
    return out


def lockstep_blocks(
    streams: Sequence[tuple[int, np.ndarray]], reps: int, block_values: int | None = None
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield (first_rep, [sums per stream]) for the same block of replicates of several streams
    (seed, G x k matrix), so that everything about one replicate is in one block. All the streams'
    buffers together stay within `block_values` doubles, and a block has at most REP_BLOCK replicates.
    (BLAS may round a sum differently for another block height: one stream of up to REP_BLOCK
    replicates blocks as `product_blocks` does, so the reference study's numbers do not move.)"""
    matrices = [np.ascontiguousarray(m, dtype=np.float64) for _, m in streams]
    width = sum(max(m.shape[0], m.shape[1], 1) for m in matrices)
    rows = block_rows(width, 1, reps, block_values)
    blocks = [
        product_blocks(seed, reps, m, block_values=rows * max(m.shape[0], m.shape[1], 1))
        for (seed, _), m in zip(streams, matrices)
    ]
    for parts in zip(*blocks):
        yield parts[0][0], [sums for _, sums in parts]


class Progress:
    """Replicates done across streams, reported through `report(done, total)` every `every` seconds
    (thread-safe; the callback runs on whichever thread crosses the interval). A run shorter than
    `every` reports nothing; a run that reported something also reports its end."""

    def __init__(self, total: int, report: Callable[[int, int], None] | None, every: float = 2.0):
        import time

        self.total, self.report, self.every = total, report, every
        self.done = 0
        self.reported = False
        self._clock = time.monotonic
        self._last = self._clock()
        self._lock = threading.Lock()

    def add(self, reps: int) -> None:
        if self.report is None:
            return
        with self._lock:
            self.done += reps
            now = self._clock()
            finished = self.done >= self.total
            if now - self._last < self.every and not (finished and self.reported):
                return
            self._last = now
            self.reported = True
            done = self.done
        self.report(done, self.total)


def stream_sums(
    streams: Sequence[tuple[int, np.ndarray]],
    reps: int,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[np.ndarray]:
    """The (reps x k) replicate sums of each independent stream (seed, G x k matrix), the streams
    computed at once on `workers` threads (default: the available cores), the largest first. A stream
    counts and multiplies on its own thread, so a row's counts are still in that core's cache when they
    are multiplied (counting on a second thread made 5 streams on 2 cores slower: figures: docs/benchmarks.md,
    "Figures behind design choices");
    only the last `workers - 1` streams, which run when others have finished, count ahead on a thread
    of their own. Each stream's numbers are those `product_blocks` gives alone: the threads share
    nothing but the progress count."""
    workers = min(len(streams), workers or available_cores())
    counter = Progress(reps * len(streams), progress)
    order = sorted(range(len(streams)), key=lambda i: -streams[i][1].shape[0])
    ahead = set(order[len(order) - (workers - 1) :]) if workers > 1 else set()

    stop = threading.Event()  # set when the caller gave up (Ctrl-C): each thread ends after its block

    def one(i: int) -> np.ndarray | None:
        seed, matrix = streams[i]
        matrix = np.ascontiguousarray(matrix, dtype=np.float64)
        out = np.empty((reps, matrix.shape[1]), dtype=np.float64)
        for start, sums in product_blocks(seed, reps, matrix, prefetch=i in ahead):
            if stop.is_set():
                return None
            out[start : start + sums.shape[0]] = sums
            counter.add(sums.shape[0])
        return out

    # `one` gives None only once `stop` is set, and then this call raises: every stream's sums are here
    if workers < 2:
        return cast(list[np.ndarray], [one(i) for i in range(len(streams))])
    with one_blas_thread(), ThreadPoolExecutor(workers, thread_name_prefix="autheval-streams") as pool:
        try:
            done = dict(zip(order, pool.map(one, order)))
        except BaseException:  # KeyboardInterrupt in this thread: the pool's exit waits a block, not a stream
            stop.set()
            raise
    return cast(list[np.ndarray], [done[i] for i in range(len(streams))])


# --- the `poisson` scheme's weights, the hash of sql/estimates/portable_replicates_poisson.sql in C and numpy -----

HASH_PRIME = 2147483647  # 2^31 - 1: the modulus of the portable integer hash
# The Poisson(1) CDF at 0..10 (sql/estimates/portable_replicates_poisson.sql's thresholds on u = k / HASH_PRIME).
POISSON_CDF = (
    0.36787944117144233,
    0.7357588823428847,
    0.9196986029286058,
    0.9810118431238463,
    0.9963401531726563,
    0.9994058151824183,
    0.999916758850712,
    0.9999897508033253,
    0.999998874797402,
    0.9999998885745216,
    0.9999999899522336,
)
POISSON_CHUNK = 1 << 12  # clusters per piece: a block's weights of a piece (8 MB) written then multiplied
# while warm, faster than pieces of 2^14 (figures: docs/benchmarks.md, "Figures behind design choices")
POISSON_BLOCK = 256  # replicates per block


def poisson_cutpoints() -> np.ndarray:
    """K[j] = the smallest grid index k with k / HASH_PRIME >= POISSON_CDF[j] (the division in doubles,
    as the SQL does it), so that weight(k) = #{j : k >= K[j]}."""
    cuts = []
    for c in POISSON_CDF:
        k = int(c * HASH_PRIME)
        while k > 0 and (k - 1) / HASH_PRIME >= c:
            k -= 1
        while k / HASH_PRIME < c:
            k += 1
        cuts.append(k)
    return np.array(cuts, dtype=np.int64)


CUTPOINTS = poisson_cutpoints()
CUTPOINTS_U64 = CUTPOINTS.astype(np.uint64).tobytes()  # the C extension's copy
BUCKET_BITS = 20  # the weight is looked up by the grid index's top bits (2048 buckets of 2^20)


def _bucket_tables() -> tuple[np.ndarray, np.ndarray]:
    """(weight at each bucket's first index, whether a cutpoint falls inside the bucket): outside
    those few buckets (0.2% of the grid) every index of a bucket has the bucket's weight."""
    starts = np.arange((HASH_PRIME >> BUCKET_BITS) + 1, dtype=np.int64) << BUCKET_BITS
    base = np.searchsorted(CUTPOINTS, starts, side="right").astype(np.float64)
    mixed = np.searchsorted(CUTPOINTS, starts + (1 << BUCKET_BITS) - 1, side="right") != base
    return base, mixed


BUCKET_WEIGHT, BUCKET_MIXED = _bucket_tables()


def poisson_weights(seed: int, first_rep: int, reps: int, first_rank: int, n_ranks: int) -> np.ndarray:
    """(reps x n_ranks) Poisson(1) weights of replicates first_rep.. and cluster ranks first_rank..:
    exactly the weights of sql/estimates/portable_replicates_poisson.sql (integer hash, every intermediate below
    2^62; the Poisson(1) quantile of u = k / HASH_PRIME, 11 for the 1e-9 beyond). Computed by the C
    extension where it is built (a vectorised loop, figures: docs/benchmarks.md, issue 30; the same weights:
    tests), else by its fallback `numpy_poisson_weights` (by bucket tables)."""
    p = HASH_PRIME
    module = compiled_extension()
    if module is not None:
        weights = np.empty((reps, n_ranks), dtype=np.float64)
        module.poisson_weights(seed % p, first_rep, first_rank, CUTPOINTS_U64, weights, reps)
        return weights
    return numpy_poisson_weights(seed, first_rep, reps, first_rank, n_ranks)


def numpy_poisson_weights(seed: int, first_rep: int, reps: int, first_rank: int, n_ranks: int) -> np.ndarray:
    """`poisson_weights` in numpy: the C extension's fallback where it is not built (and its oracle)."""
    p = HASH_PRIME
    rep = np.arange(first_rep, first_rep + reps, dtype=np.int64)
    rep_key = (rep * 48271 + seed % p) % p
    start = (rep_key * 69621 + first_rank) % p  # h1 of the first rank; the next ranks count up mod p
    h = start[:, None] + np.arange(n_ranks, dtype=np.int64)[None, :]
    for row, first_wrapped in enumerate((p - start).tolist()):  # h1 = (start + i) mod p: one wrap at most
        if first_wrapped < n_ranks:
            h[row, first_wrapped:] -= p
    h *= h
    h += rep_key[:, None]
    h %= p  # h2
    h *= 48271
    h += 12345
    h %= p  # the grid index k of u
    bucket = h >> BUCKET_BITS
    weights = BUCKET_WEIGHT[bucket]
    mixed = np.flatnonzero(BUCKET_MIXED[bucket])  # about 0.2% of the pairs: their weight exactly
    if mixed.size:
        weights.flat[mixed] = np.searchsorted(CUTPOINTS, h.flat[mixed], side="right")
    return weights


def poisson_piece_products(
    seed: int, reps: int, pieces: Iterable[np.ndarray], workers: int | None = None
) -> np.ndarray | None:
    """`poisson_products(seed, 0, reps, matrix)` to the bit, the (G x k) statistics matrix given as its
    consecutive pieces of POISSON_CHUNK rows in rank order (the last may be shorter), so that it is never
    held whole (10^7 clusters: 1.3 GB): the same products, and each block's products added in piece
    order as there. A few pieces are in flight on `workers` threads. None when there is no piece."""
    blocks = [(first, min(POISSON_BLOCK, reps - first)) for first in range(0, reps, POISSON_BLOCK)]
    out: np.ndarray | None = None

    def products(rank: int, piece: np.ndarray) -> list[np.ndarray]:
        return [np.dot(poisson_weights(seed, first, rows, rank, piece.shape[0]), piece) for first, rows in blocks]

    def add(parts: list[np.ndarray]) -> None:
        assert out is not None  # made with the first piece
        for (first, rows), product in zip(blocks, parts):
            out[first : first + rows] += product

    workers = workers or available_cores()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="autheval-poisson") if workers > 1 else None
    pending: deque = deque()
    try:
        with one_blas_thread() if pool else nullcontext():
            rank = 0
            for piece in pieces:
                if out is None:
                    out = np.zeros((reps, piece.shape[1]), dtype=np.float64)
                if pool is None:
                    add(products(rank, piece))
                else:
                    pending.append(pool.submit(products, rank, piece))
                    while len(pending) > 2 * workers:  # bounded: a few pieces held, in piece order
                        add(pending.popleft().result())
                rank += piece.shape[0]
            while pending:
                add(pending.popleft().result())
    finally:
        if pool:
            for future in pending:
                future.cancel()
            pool.shutdown()
    return out


def poisson_products(
    seed: int, first_rep: int, reps: int, matrix: np.ndarray, workers: int | None = None
) -> np.ndarray:
    """(reps x k) replicate sums of the `poisson` scheme: the weights of `poisson_weights` times the
    (G x k) statistics matrix (rank order), a block of POISSON_BLOCK replicates at a time, the
    clusters in pieces of POISSON_CHUNK on `workers` threads. The pieces' products are added in
    piece order, so the sums do not depend on the number of threads."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    g, k = matrix.shape
    out = np.zeros((reps, k), dtype=np.float64)
    pieces = [(a, min(POISSON_CHUNK, g - a)) for a in range(0, g, POISSON_CHUNK)]
    workers = min(len(pieces), workers or available_cores())

    def piece(block: tuple[int, int], part: tuple[int, int]) -> np.ndarray:
        (first, rows), (rank, size) = block, part
        return np.dot(poisson_weights(seed, first_rep + first, rows, rank, size), matrix[rank : rank + size])

    blocks = [(first, min(POISSON_BLOCK, reps - first)) for first in range(0, reps, POISSON_BLOCK)]
    pool = ThreadPoolExecutor(workers, thread_name_prefix="autheval-poisson") if workers > 1 else None
    try:
        with one_blas_thread() if pool else nullcontext():
            for block in blocks:
                first, rows = block
                parts = pool.map(partial(piece, block), pieces) if pool else (piece(block, p) for p in pieces)
                for product in parts:
                    out[first : first + rows] += product
    finally:
        if pool:
            pool.shutdown()
    return out
