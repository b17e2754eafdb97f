# The C extension's interface (autheval/estimation/_stream_counts.c), for mypy; optional at run time
# (autheval/estimation/compiled_stream.py falls back to numpy without it).
from typing_extensions import Buffer

def counts(state: Buffer, n_clusters: int, out: Buffer, /) -> None:
    """The next rows' multiplicities, written into `out` (state advanced in place)."""

def poisson_weights(
    seed_mod_p: int, first_rep: int, first_rank: int, cutpoints: Buffer, out: Buffer, reps: int, /
) -> None:
    """The poisson scheme's weights, written into `out`."""

def layout() -> dict[str, int]:
    """The state layout: lanes, buffer_raws, state_len."""
