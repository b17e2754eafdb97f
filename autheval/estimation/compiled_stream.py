"""Multiplicities of numpy's bounded-integer stream, counted in C: the same numbers, sooner.

The exact bootstraps need, per replicate, how often each of G clusters is drawn by
`default_rng(seed).integers(0, G, size=G)`. In numpy that is `integers` (a function-pointer call per
32 bits) and `bincount`, which holds the GIL, so two streams cannot count at once.
The C extension `autheval.estimation._stream_counts` (built from autheval/estimation/_stream_counts.c at install, a few
kilobytes, nothing but Python's own headers) produces the same stream and counts it in one loop with
the GIL released, faster (`make bench` times both in one run; figures: docs/benchmarks.md, the inner
loops of `make bench`).

Counts are whole numbers, so every product computed from them is the numpy path's to the bit; tests
compare the counts with numpy's for several seeds, cluster counts (one rejecting about 190 values a row)
and row splits, and whole estimates with and without the extension. Where the extension could not be
built (no C compiler), the numpy path runs, with the same results: each of the extension's two loops
has its numpy fallback in autheval/estimation/bootstrap.py (`stream_counts`, `numpy_poisson_weights`), the one
kept as the other's oracle in the tests. AUTHEVAL_COMPILED=0 never uses it
(the benchmark's baseline); by default it is used whenever it is built.
"""

from __future__ import annotations

import os
import sys

import numpy as np

MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645  # PCG64's 128-bit multiplier (numpy's default)
MASK128 = (1 << 128) - 1
MASK64 = (1 << 64) - 1
MAX_CLUSTERS = (1 << 32) - 1  # numpy draws from 64-bit values (another method) from 2^32 clusters on


COMPILED_ENV = "AUTHEVAL_COMPILED"


def compiled_setting() -> bool:
    """$AUTHEVAL_COMPILED: unset, empty or 1 uses the C module where it is built, 0 never does; anything
    else is one line naming the variable (ValueError)."""
    text = os.environ.get(COMPILED_ENV, "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"${COMPILED_ENV}={text[:40]!r}: must be 0 (never use the compiled module) or 1 (default)")
    return text != "0"


def extension():
    """The C module, or None where it was not built (or AUTHEVAL_COMPILED=0)."""
    if not compiled_setting() or sys.byteorder != "little":
        return None
    try:
        from autheval.estimation import _stream_counts
    except ImportError:
        return None
    return _stream_counts


def wanted(n_clusters: int) -> bool:
    """Whether a stream over `n_clusters` clusters is counted by the extension."""
    return 2 <= n_clusters <= MAX_CLUSTERS and extension() is not None


class CompiledStream:
    """The stream `default_rng(seed).integers(0, G, ...)` as multiplicity rows, G draws a row."""

    def __init__(self, seed: int, n_clusters: int):
        self.module = extension()
        layout = self.module.layout()
        lanes, raws = layout["lanes"], layout["buffer_raws"]
        self.g = int(n_clusters)
        seeded = np.random.default_rng(seed).bit_generator.state["state"]  # numpy's seeding, exactly
        s, inc = seeded["state"], seeded["inc"]
        first = []  # the lanes start at the stream's first `lanes` states
        for _ in range(lanes):
            s = (s * MULTIPLIER + inc) & MASK128
            first.append(s)
        a, c = 1, 0  # `lanes` steps at once: state * a + c
        for _ in range(lanes):
            a, c = (a * MULTIPLIER) & MASK128, (c * MULTIPLIER + inc) & MASK128
        head = (
            [x >> 64 for x in first]
            + [x & MASK64 for x in first]
            + [a >> 64, a & MASK64, c >> 64, c & MASK64, 2 * raws]
        )  # position: buffer empty
        self.state = np.zeros(layout["state_len"], dtype=np.uint64)
        self.state[: len(head)] = head

    def counts(self, out: np.ndarray) -> np.ndarray:
        """Fill `out` (rows x G, float64, C order) with the next rows' multiplicities; return it."""
        self.module.counts(self.state, self.g, out)
        return out
