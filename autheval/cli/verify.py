"""`autheval verify RECEIPT`: re-derive a run from its receipt (autheval.reporting.receipt) and compare
every output.

autheval/cli/main.py calls register(subparsers); the receipt module is imported only when it runs.
"""

from __future__ import annotations

import argparse

from autheval.cli.flags import add_command, path_flag


def cmd_verify(args) -> int:
    from autheval.reporting.receipt import verification_lines, verify

    result = verify(args.receipt)
    for line in verification_lines(result):
        print(line)
    return 0 if result.identical else 1


VERIFY_HELP = "re-derive a run from its receipt and compare every output"
VERIFY_DESCRIPTION = """\
Re-hash the inputs a receipt.json names (written by evaluate, compare and every lake run of demo), re-run
its command into a temporary folder, and compare every output with the receipt's SHA-256: one line per
output (identical / DIFFERENT / missing / new), changed inputs and packages named. Exit 0 when every
output is identical, 1 otherwise."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `verify` to the `autheval` parser."""
    p = add_command(subparsers, "verify", VERIFY_HELP, VERIFY_DESCRIPTION, run=cmd_verify)
    p.add_argument("receipt", type=path_flag, metavar="RECEIPT", help="a receipt.json")
