"""Command-line entry for the raw path: `autheval synth --n N --out DIR [--seed S]`.

autheval/cli.py calls register(subparsers); heavy imports wait until the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.errors import RecordError

SYNTH_SEED = 20260706  # = autheval.raw.synth.SYNTH_SEED (AuthEval's data seed), kept here for a quick CLI


def cmd_synth(args) -> int:
    from autheval.raw.synth import synth_cohort

    if args.n < 1:
        raise RecordError("--n", None, f"must be a positive number of images, got {args.n}")
    try:
        cohort = synth_cohort(args.n, args.out, seed=args.seed, size=tuple(args.size), overwrite=args.overwrite)
    except FileExistsError as err:
        raise RecordError(str(args.out), None, str(err)) from err
    roles = cohort.truth.column("role").to_pylist()
    print(f"wrote {len(roles)} images to {cohort.images}")
    print(f"  {roles.count('exact_duplicate')} exact duplicates, {roles.count('near_duplicate')} near duplicates")
    print(f"  {cohort.metadata}")
    print(f"  {cohort.labels}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `synth` subcommand to the `autheval` parser."""
    p = subparsers.add_parser("synth", help="write a synthetic ISIC-2019-shaped cohort (CSV files + JPEGs)")
    p.add_argument("--n", type=int, required=True, help="number of images")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--seed", type=int, default=SYNTH_SEED, help=f"generator seed (default {SYNTH_SEED})")
    p.add_argument("--size", type=int, nargs=2, default=(1024, 768), metavar=("W", "H"),
                   help="image size in pixels (default 1024 768)")
    p.add_argument("--overwrite", action="store_true", help="replace images already in --out")
    p.set_defaults(func=cmd_synth)
