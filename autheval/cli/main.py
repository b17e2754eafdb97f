"""The `autheval` command line: the top-level parser, one module per command registered on it, and
main(), which turns every way a command can fail into one line and an exit code. Heavy packages (Dagster,
torch) are imported only by the commands that need them, so `autheval evaluate` and `autheval compare`
stay quick."""

from __future__ import annotations

import argparse
import sys

from autheval import __version__
from autheval.cli import demo, evaluate, pool, query, site, ui, verify
from autheval.cli.aggregate import AGGREGATE_HELP
from autheval.cli.evaluate import _UnneededImports
from autheval.errors import RecordError

DESCRIPTION = """\
Authority-preserving evaluation of medical vision-language assistants.

A model proposes an action (how urgently a lesion is reviewed); the local service keeps the authority
to accept or replace it. autheval scores both under the same local rule and reports the authority gap
Delta = J_auth - J = p * delta, with whole-cluster bootstrap intervals, per image and per cluster."""

EPILOG = """\
examples:
  autheval evaluate --input log.csv --output-dir results
  autheval compare --arm "A=a.csv" --arm "B=b.csv" --output-dir results
  autheval demo                      # the reference study into warehouse/lake, then its tables
  autheval query "select * from study_summary"

Results go to stdout (and files); progress and errors go to stderr. Bad input ends with one line
naming the file, flag or column, and exit code 2.
Run `autheval COMMAND --help` for the options of each command."""


def _command_word(argv: list[str]) -> str | None:
    """The subcommand named on a command line (the first word that is not an option), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


class _Parser(argparse.ArgumentParser):
    """argparse's own refusals (an unknown flag, a value of the wrong type, an empty path) as every
    other refusal is: one line on stderr, exit 2. Subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"autheval: error: {message}; see `{self.prog} --help`\n")


def build_parser(command: str | None = "aggregate") -> argparse.ArgumentParser:
    """The `autheval` parser. `command`: the subcommand about to run; `aggregate` is registered with
    its options (importing autheval.proposals.cct) only when it is that command (the default: every command)."""
    parser = _Parser(
        prog="autheval", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.set_defaults(build_parser=build_parser)  # for verify, which parses a receipt's command line
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    evaluate.register(sub)
    demo.register(sub)
    query.register(sub)

    from autheval.cli.lake import register as register_lake
    from autheval.cli.mavic import register as register_mavic
    from autheval.cli.monitor import register as register_monitor
    from autheval.cli.rules import register as register_rules
    from autheval.cli.synth import register as register_raw

    register_raw(sub)
    register_rules(sub)
    register_monitor(sub)
    register_lake(sub)
    register_mavic(sub)
    site.register(sub)
    pool.register(sub)
    if command == "aggregate":
        from autheval.cli.aggregate import register as register_aggregate

        register_aggregate(sub)
    else:  # listed in --help with its help line; its options are registered when it runs
        sub.add_parser("aggregate", help=AGGREGATE_HELP, add_help=False)

    verify.register(sub)
    ui.register(sub)
    from autheval.cli.serve import register as register_serve

    register_serve(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (RecordError, ValueError: exit 2), what the machine refuses (OSError:
    a full disk, a read-only or forbidden folder; exit 1) and Ctrl-C (exit 130) end in one line on
    stderr, from whatever command and stage; any other exception is a bug and keeps its traceback."""
    try:
        return _run(argv)
    except RecordError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return err.exit_code
    except ValueError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"autheval: error: {_os_error_line(err)}", file=sys.stderr)
        return 1
    except BaseException as err:
        if type(err).__name__ in LAKE_REFUSALS and not _is_interrupt(err):
            print(f"autheval: error: {err}", file=sys.stderr)  # another run holds the lake; no such snapshot
            return 1
        if not _is_interrupt(err):
            raise
        print("autheval: interrupted", file=sys.stderr)
        return 130


# the lake's own refusals (warehouse.snapshots), named so that nothing is imported to catch them
LAKE_REFUSALS = ("LakeBusy", "SnapshotError")


def _run(argv: list[str] | None) -> int:
    if argv is None and sys.argv[1:2] in (["evaluate"], ["compare"]):
        import os

        # before numpy loads: the estimators' products are small and run beside their own threads
        # (see autheval.estimation.bootstrap.one_blas_thread, which does this where threadpoolctl is installed)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser(_command_word(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if (
        argv is None
        and args.command in ("evaluate", "compare")
        and not any(m in sys.modules for m in _UnneededImports.REFUSED)
        and args.engine == "duckdb"
    ):  # Ibis's Spark backend imports pandas
        sys.meta_path.insert(0, _UnneededImports())  # the command-line process only, not a library caller
    if args.command in ("evaluate", "compare", "demo"):
        from autheval.records.warnings import print_warnings_plainly

        print_warnings_plainly()  # one `autheval: warning: ...` line each, on stderr
    return args.func(args)


# Ctrl-C as the libraries report it when it lands inside them (not KeyboardInterrupt): DuckDB's
# InterruptException and Dagster's DagsterExecutionInterruptedError, named so that neither is imported
INTERRUPTS = ("InterruptException", "DagsterExecutionInterruptedError")


def _is_interrupt(err: BaseException | None) -> bool:
    """Ctrl-C, also when a library re-raised it as its own error (DuckDB: RuntimeError('Query
    interrupted') from KeyboardInterrupt)."""
    while err is not None:
        if isinstance(err, KeyboardInterrupt) or type(err).__name__ in INTERRUPTS:
            return True
        err = err.__cause__
    return False


def _os_error_line(err: OSError) -> str:
    """An OSError in one line: the file, then what the system said (no errno number, no traceback)."""
    what = (err.strerror or str(err)).strip().splitlines()[0]
    if err.filename is None:
        return what
    where = f"{err.filename} -> {err.filename2}" if err.filename2 is not None else str(err.filename)
    return f"{where}: {what}"


if __name__ == "__main__":
    sys.exit(main())
