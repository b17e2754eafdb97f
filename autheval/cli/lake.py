"""`autheval lake recover --lake DIR [--snapshot N]`: serve a whole committed snapshot again after the
lake's pointer (CURRENT) was lost, corrupted or names a snapshot that is not there. Every command
refuses such a lake in one line and changes nothing; this is the explicit way back, and it removes
nothing either (docs/snapshots.md, "When the pointer is lost").

autheval/cli/main.py calls register(subparsers); the lake code is imported only when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.cli.flags import add_command, add_lake_flag
from autheval.errors import RecordError

LAKE_HELP = "repair a lake: `recover` serves a whole committed snapshot again after its pointer was lost"


def cmd_lake_recover(args) -> int:
    from autheval import __version__
    from warehouse.lake import Lake
    from warehouse.snapshots import recover_pointer

    if not Path(args.lake).is_dir():
        raise RecordError(str(args.lake), None, "no such lake folder (--lake)")
    if args.snapshot is not None and not 0 <= args.snapshot <= 99_999_999:
        raise RecordError("--snapshot", None, f"must be a snapshot number from 0 to 99999999, got {args.snapshot}")
    print(recover_pointer(Lake(args.lake).location, args.snapshot, software=f"autheval {__version__}"))
    return 0


LAKE_DESCRIPTION = """\
Repair a lake. `recover` serves a whole committed snapshot again when the lake's pointer (CURRENT) is
missing, corrupt, a link, or names a snapshot that is not there (every other command refuses such a lake and
changes nothing). By default the newest snapshot whose files are all there is served; --snapshot N serves
snapshot N's tables (committed again as a new snapshot when it is not the newest). Nothing is removed; an odd
CURRENT is renamed aside."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `lake recover` to the `autheval` parser."""
    p = add_command(subparsers, "lake", LAKE_HELP, LAKE_DESCRIPTION)
    sub = p.add_subparsers(dest="lake_command", required=True)
    recover = add_command(
        sub, "recover", "serve a whole committed snapshot again (nothing is removed)", run=cmd_lake_recover
    )
    add_lake_flag(recover)
    latest = "the newest whose files are all there"
    recover.add_argument("--snapshot", type=int, metavar="N", help=f"the snapshot to serve (default: {latest})")
