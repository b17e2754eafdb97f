"""AuthEvalWarning and how it is issued and printed: one plain line per thing a user should know.

Its own small module (no pyarrow, no DuckDB) so that the estimators, the proposals and benchmark files,
models/ and the command line can warn, or print warnings, without importing the record reader.
"""

from __future__ import annotations

import warnings


class AuthEvalWarning(UserWarning):
    """Something a user should know that does not stop the run (ignored columns, a degenerate
    interval, a comparison without a contrast). The CLI prints each as one line on stderr."""


def warn(message: str) -> None:
    """Issue an AuthEvalWarning (one line)."""
    warnings.warn(message, AuthEvalWarning, stacklevel=3)


def print_warnings_plainly(stream=None) -> None:
    """Print AuthEvalWarnings as `autheval: warning: <message>` lines (on stderr by default), every
    time they are issued; other warnings keep Python's format. For the command line."""
    import sys

    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, AuthEvalWarning):
            print(f"autheval: warning: {message}", file=stream or sys.stderr, flush=True)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("always", AuthEvalWarning)
