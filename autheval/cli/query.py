"""`autheval query`: one read-only SQL statement over the lake's catalog, streamed to stdout, with
its Ctrl-C handling (a watcher that interrupts DuckDB) and its stdout failures as one line each.

autheval/cli/main.py calls register(subparsers); DuckDB and the catalog are imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.cli.flags import add_command, add_lake_flag

QUERY_FORMATS = ("table", "csv", "json")  # what autheval.reporting.tables.write_batches writes


def cmd_query(args) -> int:
    """Stream the result to stdout. Every way it can end is one line on stderr: a refused or failed
    query or an unreadable catalog (exit 2), stdout closed or its device full (exit 1), Ctrl-C (130);
    a reader that stops early (`| head`) ends it quietly (exit 0)."""
    import os

    def discard_stdout():  # so that the interpreter's last flush has nowhere to fail
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # not a file (a caller's buffer): nothing to flush at exit
            pass

    def fail(line: str, code: int) -> int:
        print(f"autheval: error: {line}", file=sys.stderr)
        return code

    if sys.stdout is None or not _is_open(sys.stdout):
        return fail("query: standard output is closed: nowhere to write the result", 1)
    try:
        from autheval.reporting.tables import write_batches
        from warehouse.catalog import stream
        from warehouse.lake import Lake

        output = _Output(sys.stdout)
        with _CtrlCStopsQueries():
            write_batches(stream(Lake(args.lake, snapshot=args.snapshot), args.sql), args.format, output)
        output.flush()
    except BrokenPipeError:  # `autheval query ... | head`: the reader has all it wanted
        discard_stdout()
    except _OutputFailed as err:
        discard_stdout()
        return fail(f"query: cannot write the result to standard output: {err}", 1)
    except FileNotFoundError as err:
        return fail(str(err), 2)
    except ValueError as err:  # QueryRefused, CatalogError: one line each
        return fail(str(err), 2)
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C still pending is not a second traceback
        discard_stdout()
        print("autheval: interrupted", file=sys.stderr)
        return 130
    return 0


class _CtrlCStopsQueries:
    """Ctrl-C stops the running query at once: the signal's wakeup byte reaches a thread that
    interrupts DuckDB, which itself looks for a signal only between tasks (a Ctrl-C early in a long
    join otherwise went unseen for a long time). Main thread only; elsewhere a no-op."""

    def __enter__(self):
        import os
        import select
        import signal
        import threading

        from warehouse.catalog import interrupt_queries

        self._pipe = None
        if threading.current_thread() is not threading.main_thread():
            return self
        self._pipe = pipe = os.pipe()
        os.set_blocking(pipe[1], False)
        self._previous = signal.set_wakeup_fd(pipe[1])

        def watch():  # after a Ctrl-C, again every 0.1 s: one that lands before the query starts is lost
            stopping = False
            while True:
                if select.select([pipe[0]], [], [], 0.1 if stopping else None)[0]:
                    data = os.read(pipe[0], 64)
                    if not data:
                        return
                    stopping = stopping or signal.SIGINT in data
                if stopping:
                    interrupt_queries()

        self._watcher = threading.Thread(target=watch, name="autheval-ctrl-c", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        import os
        import signal

        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous)
            os.close(self._pipe[1])  # the watcher reads the end of the pipe and stops
            self._watcher.join(timeout=1)
            os.close(self._pipe[0])


def _is_open(out) -> bool:
    """False for a stdout whose descriptor is closed (`>&-`); a stream without one counts as open."""
    import os

    try:
        os.fstat(out.fileno())
    except (AttributeError, ValueError):  # io.UnsupportedOperation (a buffer), or closed
        return not getattr(out, "closed", False)
    except OSError:
        return False
    return True


class _OutputFailed(Exception):
    """Writing to stdout failed (a full device, an I/O error): told apart from reading errors."""


class _Output:
    """stdout for `query`, with its write errors (other than a closed pipe) as _OutputFailed."""

    def __init__(self, out):
        self._out = out

    def write(self, text: str) -> int:
        try:
            return self._out.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _OutputFailed(err.strerror or str(err)) from err

    def flush(self) -> None:
        try:
            self._out.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _OutputFailed(err.strerror or str(err)) from err


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse names the flag in its one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


QUERY_HELP = "read-only SQL over the lake's catalog, streamed to stdout"
QUERY_DESCRIPTION = """\
Run one read-only statement (SELECT, WITH ... SELECT, DESCRIBE, SHOW, EXPLAIN [ANALYZE] of a SELECT) over the
lake's catalog and stream the result to stdout. Anything else (COPY, EXPORT, ATTACH, SET, PRAGMA, CREATE,
EXPLAIN ANALYZE of anything but a SELECT, several statements, reading files other than those the catalog's
views read) is refused with exit code 2. A large sort spills to a private temporary folder outside the lake,
capped at 4 GiB or half its free space ($AUTHEVAL_QUERY_SPILL sets another cap) and removed at exit."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `query` to the `autheval` parser."""
    p = add_command(subparsers, "query", QUERY_HELP, QUERY_DESCRIPTION)
    p.add_argument("sql", help='one SQL statement, e.g. "select * from estimates"')
    add_lake_flag(p, Path)
    p.add_argument(
        "--snapshot",
        type=positive_int,
        metavar="N",
        help="read kept snapshot N instead of the served one (`select * from lake_snapshots` lists them)",
    )
    p.add_argument(
        "--format",
        choices=QUERY_FORMATS,
        default="table",
        help="table (aligned text, one line per row: control characters escaped as \\n, \\r, \\t, \\xNN; "
        "NaN, inf, -inf as such), csv (null and NaN as an empty cell, infinities as inf and -inf, cells with a "
        "newline, carriage return, quote or comma quoted), or json (one array of row objects; JSON has no NaN "
        "or Infinity, so NaN and infinities are written as null). In every format: dates and timestamps as "
        "ISO text from DuckDB's values (years past 9999 with a sign, infinity and -infinity as such, 24:00:00 "
        "kept), intervals as ISO 8601 durations, blobs with \\xNN escapes, lists, structs and maps as JSON, "
        "decimals exact",
    )
    p.set_defaults(func=cmd_query)
