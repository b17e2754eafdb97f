"""`autheval aggregate`: CCT over a `(case_id, variant, option, prob)` table made elsewhere.

autheval/cli/main.py calls register(subparsers); numpy and pyarrow are imported only when the command runs.
Bad input raises RecordError (one line naming the file and column; exit 2); the output is written
atomically, so a failed run leaves no file.
"""

from __future__ import annotations

import argparse

from autheval.cli.common import write_output
from autheval.cli.flags import add_command, check_not_an_input, output_format, path_flag
from autheval.errors import RecordError

# autheval/cli/main.py lists the command with this line in --help before registering it
AGGREGATE_HELP = "CCT: aggregate K prompt variants' probabilities into one ranked slate per case"


def cmd_aggregate(args) -> int:
    """`aggregate`: one ranked slate per case from K prompt variants' probabilities, written like every
    table command's output (flags.output_format, common.write_output)."""
    from autheval.io import read_table
    from autheval.proposals.cct import USES, aggregate_table

    fmt = output_format(args.output)
    check_not_an_input([args.output], [("--input", args.input)], "--output")
    for flag, value in (("lam", args.lam), ("beta", args.beta)):
        if value is not None and flag not in USES[args.method]:
            raise RecordError(
                f"--{flag}", None, f"is not used by method {args.method!r} (lam: confonly, cc; beta: consonly, cc)"
            )
    source = str(args.input)
    result = aggregate_table(read_table(args.input), args.method, args.lam, args.beta, source=source)
    write_output(result, args.output, fmt)
    print(args.output)
    return 0


AGGREGATE_DESCRIPTION = """\
Confidence-consistency test-time aggregation (DermoGPT). The input (CSV or Parquet) has exactly the columns
case_id, variant, option, prob: for every case the variants 0..K-1 (0 = the original prompt), each a
probability vector over the options a0..a3 summing to 1. Writes case_id, option, prob, rank (rank 0 = the
slate head; ties go to the lower option) to --output (.csv or .parquet) and prints its path. Methods: single
(variant 0), vote (prob = vote share; ranked by votes, then mean probability), meanprob, confonly (w =
softmax(lam * confidence)), consonly (w = softmax(-beta * deviation)), cc (both)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `aggregate` subcommand to the `autheval` parser."""
    from autheval.proposals.cct import DEFAULT_BETA, DEFAULT_LAM, METHODS

    p = add_command(subparsers, "aggregate", AGGREGATE_HELP, AGGREGATE_DESCRIPTION)
    p.add_argument("--input", required=True, type=path_flag, metavar="PROBS", help="the variant probabilities")
    p.add_argument("--method", required=True, choices=METHODS, help="the aggregator")
    p.add_argument(
        "--lam",
        type=float,
        metavar="L",
        help=f"weight of the confidence margin (confonly, cc; default {DEFAULT_LAM})",
    )
    p.add_argument(
        "--beta",
        type=float,
        metavar="B",
        help=f"weight of the deviation from the barycenter (consonly, cc; default {DEFAULT_BETA})",
    )
    p.add_argument("--output", required=True, type=path_flag, metavar="OUT", help="the result, .csv or .parquet")
    p.set_defaults(func=cmd_aggregate)
