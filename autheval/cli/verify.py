"""`autheval verify RECEIPT`: re-derive a run from its receipt (autheval.reporting.receipt) and compare
every output.

autheval/cli/main.py calls register(subparsers); the receipt module is imported only when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.cli.flags import add_command, path_flag


def read_checked_receipt(path, build_parser) -> dict:
    """A receipt, its schema checked (autheval.reporting.receipt.read_receipt) and its command line
    parsed by the command's own parser (`build_parser`: autheval.cli.main's, handed down by main so that
    no module of the command line imports main): every path the re-run reads must be one of the receipt's
    hashed inputs."""
    from autheval.reporting.receipt import read_receipt

    receipt = read_receipt(path)
    check_argv_inputs(receipt, str(path), build_parser)
    return receipt


def check_argv_inputs(receipt: dict, source: str, build_parser) -> None:
    """Every path the re-run of `argv` reads is one of the receipt's hashed inputs, named by the same absolute
    path or URI (an added `--input /etc/passwd`, a relative path resolved against verify's folder, an
    unknown or abbreviated flag: one line, exit 2). argv is parsed by the command's own parser."""
    import contextlib
    import io

    from autheval.reporting.receipt import RERUN_TARGET, ReceiptError, _retargeted

    command = receipt["command"]
    argv = _retargeted(receipt["argv"], RERUN_TARGET[command], "/receipt-target")
    parser = build_parser(command)
    for action in parser._actions:  # no abbreviated flags: each flag as the command writes it
        for sub in (getattr(action, "choices", None) or {}).values():
            if hasattr(sub, "allow_abbrev"):
                sub.allow_abbrev = False
    parser.allow_abbrev = False
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parser.parse_args(argv)
    except SystemExit:
        line = said.getvalue().strip().splitlines()
        said_line = line[-1] if line else "refused"
        raise ReceiptError(source, "argv", f"not a command line of {command}: {said_line}") from None
    hashed = {entry["path"] for entry in receipt["inputs"]}
    target = RERUN_TARGET[command][2:].replace("-", "_")
    for name, value in sorted(vars(args).items()):
        if name == target or callable(value):
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            if name == "arm" and isinstance(item, str) and "=" in item:
                item = item.split("=", 1)[1]
            elif name == "input" and isinstance(item, str) and "://" in item:
                pass
            elif not isinstance(item, Path):
                continue
            text = str(item)
            if "://" not in text and not Path(text).is_absolute():
                raise ReceiptError(source, "argv", f"{text!r} is a relative path (verify runs from anywhere)")
            if text in hashed:
                continue
            if command == "demo" and "://" not in text and Path(text).is_dir():
                continue  # the demo's folders (ISIC files, model folders) are named, not hashed
            raise ReceiptError(source, "argv", f"reads {text!r}, which is not one of the receipt's hashed inputs")


def cmd_verify(args) -> int:
    from autheval.reporting.receipt import verification_lines, verify

    read_checked_receipt(args.receipt, args.build_parser)
    result = verify(args.receipt)
    for line in verification_lines(result):
        print(line)
    return 0 if result.identical else 1


VERIFY_HELP = "re-derive a run from its receipt and compare every output"
VERIFY_DESCRIPTION = """\
Re-hash the inputs a receipt.json names (written by evaluate, compare and every lake run of demo), re-run
its command into a temporary folder, and compare every output with the receipt's SHA-256: one line per
output (identical / DIFFERENT / missing / new), changed inputs and packages named. Exit 0 when every
input is as recorded and every output is identical, 1 otherwise; 2 for a receipt that is not one (every
path its command line reads must be one of its hashed inputs)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `verify` to the `autheval` parser."""
    p = add_command(subparsers, "verify", VERIFY_HELP, VERIFY_DESCRIPTION, run=cmd_verify)
    p.add_argument("receipt", type=path_flag, metavar="RECEIPT", help="a receipt.json")
