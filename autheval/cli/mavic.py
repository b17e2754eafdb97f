"""`autheval mavic score` (the MAVIC reward of a file of GRPO completions, models/mavic.py) and
`autheval mavic weights` (the PMI weights of S_morph from a training table of attributes and diagnoses).

autheval/cli/main.py calls register(subparsers); numpy and pyarrow are imported only when a command runs.
A bad row (a missing column, an unparseable cell, an unknown modality or reference diagnosis, an
attribute the schema lacks) is one RecordError line naming the file, column, row and rule (exit 2) and
no output is written; a completion that breaks the format is not an error, it scores r_fmt = 0. The
output is written atomically and never replaces an input.
"""

from __future__ import annotations

import argparse

from autheval.cli.common import write_output
from autheval.cli.flags import add_command, check_not_an_input, output_format, path_flag
from autheval.errors import RecordError

SCORE_COLUMNS = ("group_id", "completion", "modality", "reference_diagnosis", "reference_attributes")
TRAINING_COLUMNS = ("attributes", "modality", "diagnosis")


def _columns(table, required: tuple[str, ...], source: str) -> dict[str, list]:
    for column in required:
        if column not in table.column_names:
            raise RecordError(source, column, f"missing column (expected {', '.join(required)})")
    return {c: table.column(c).to_pylist() for c in required}


def _json_objects(values: list, source: str, column: str) -> list[dict]:
    """Each cell a JSON object (text) or already a mapping (a Parquet struct or map column)."""
    out = []
    for i, value in enumerate(values):
        if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            value = dict(value)  # an Arrow map column
        if isinstance(value, str):
            from autheval.parse import load_json  # the shared loader: depth, repeated keys, NaN

            try:
                value = load_json(value, source, column, f"row {i + 1}, value {value[:60]!r}")
            except RecordError as err:
                rule = f"must be a JSON object of attribute -> state; {err.rule}"
                raise RecordError(source, column, rule, err.example) from None
        if not isinstance(value, dict):
            raise RecordError(
                source, column, "must be a JSON object of attribute -> state", f"row {i + 1}, value {value!r}"
            )
        out.append(value)
    return out


def _texts(values: list, source: str, column: str) -> list[str]:
    out = []
    for i, value in enumerate(values):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise RecordError(source, column, "must not be empty", f"row {i + 1}")
        text = str(value)
        if text != text.strip() or not text.isprintable():  # never stripped: 'g1 ' beside 'g1' is refused
            raise RecordError(
                source,
                column,
                "must not begin or end with whitespace nor hold a control character",
                f"row {i + 1}, value {text!r}",
            )
        out.append(text)
    return out


def _provenance(table, columns: dict[str, str | None]):
    import pyarrow as pa

    from autheval import __version__

    for name, value in {**columns, "software_version": f"autheval {__version__}"}.items():
        table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
    return table


def cmd_mavic_score(args) -> int:
    """`mavic score`: every completion's MAVIC reward and its parts, with provenance, written like every
    table command's output (flags.output_format, common.write_output)."""
    import pyarrow as pa

    from autheval.io import file_sha256, read_table
    from models.mavic import OUTPUT_KEYS, load_config, load_weights, score_completions
    from models.ontology import load_ontology

    fmt = output_format(args.output)
    inputs = [("--input", args.input), ("--weights", args.weights), ("--config", args.config)]
    check_not_an_input([args.output], inputs, "--output")
    config = load_config(args.config)
    ontology = load_ontology(config.ontology)
    weights = load_weights(args.weights) if args.weights is not None else None
    source = str(args.input)
    table = read_table(args.input)
    cells = _columns(table, SCORE_COLUMNS, source)
    group_id = _texts(cells["group_id"], source, "group_id")
    modality = _texts(cells["modality"], source, "modality")
    diagnosis = _texts(cells["reference_diagnosis"], source, "reference_diagnosis")
    attributes = _json_objects(cells["reference_attributes"], source, "reference_attributes")
    scores = score_completions(
        cells["completion"],
        modality,
        diagnosis,
        attributes,
        group_id,
        weights=weights,
        config=config,
        ontology=ontology,
        source=source,
        with_rules=True,
    )
    provenance = {
        "composite": config.formula(),
        "ontology": f"{ontology.name} ({ontology.version})",
        "config_sha256": config.sha256(),
        "weights_sha256": weights.sha256 if weights else None,
        "data_sha256": file_sha256(args.input),
    }
    # a file scored before (this command's own output) has its scores and provenance replaced, never
    # written twice under one name
    written = (*OUTPUT_KEYS, "format_rule", *provenance, "software_version")
    table = table.drop_columns([c for c in table.column_names if c in written])
    for key in OUTPUT_KEYS:
        table = table.append_column(key, pa.array(scores[key], pa.float64()))
    table = table.append_column("format_rule", pa.array(scores["format_rule"].tolist(), pa.string()))
    table = _provenance(table, provenance)
    write_output(table, args.output, fmt)
    print(args.output)
    return 0


def cmd_mavic_weights(args) -> int:
    """`mavic weights`: PMI weights of the morphology features, with provenance, written like every table
    command's output (flags.output_format, common.write_output)."""
    from autheval.io import file_sha256, read_table
    from models.mavic import load_config, pmi_weights, weights_table

    fmt = output_format(args.output)
    check_not_an_input([args.output], [("--input", args.input), ("--config", args.config)], "--output")
    config = load_config(args.config)
    source = str(args.input)
    cells = _columns(read_table(args.input), TRAINING_COLUMNS, source)
    weights = pmi_weights(
        _json_objects(cells["attributes"], source, "attributes"),
        _texts(cells["modality"], source, "modality"),
        _texts(cells["diagnosis"], source, "diagnosis"),
        config=config,
        source=source,
    )
    table = _provenance(
        weights_table(weights),
        {
            "pmi_eps": repr(config.pmi_eps),
            "pmi_floor": repr(config.pmi_floor),
            "config_sha256": config.sha256(),
            "data_sha256": file_sha256(args.input),
        },
    )
    write_output(table, args.output, fmt)
    print(args.output)
    return 0


SCORE_HELP = "score a file of completions"
SCORE_DESCRIPTION = """\
Score GRPO completions with MAVIC. --input (CSV or Parquet) has the columns group_id, completion, modality
(dermoscopic or clinical), reference_diagnosis and reference_attributes (a JSON object of attribute -> state).
Writes them with r_fmt, r_acc, s_hier, s_morph, gate, reward, advantage, format_rule (why r_fmt is 0) and the
provenance (composite, ontology, config, weights, data hash, software) to --output (.csv or .parquet)."""

WEIGHTS_HELP = "PMI weights of the morphology features from a training table"
WEIGHTS_DESCRIPTION = """\
PMI(m_f; y) = log((p(m_f=1, y) + eps) / (p(m_f=1) p(y) + eps)) for every feature of the declared schemas and
every diagnosis of --input (CSV or Parquet: attributes (a JSON object), modality, diagnosis); writes
diagnosis, feature, pmi, weight (max(pmi, pmi_floor)) to --output."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mavic score` and `mavic weights` to the `autheval` parser."""
    p = subparsers.add_parser("mavic", help="MAVIC: the morphology-grounded reward of GRPO completions (DermoGPT)")
    sub = p.add_subparsers(dest="mavic_command", required=True)
    score = add_command(sub, "score", SCORE_HELP, SCORE_DESCRIPTION)
    score.add_argument("--input", required=True, type=path_flag, metavar="FILE", help="the completions")
    score.add_argument("--output", required=True, type=path_flag, metavar="FILE", help="the scores, .csv or .parquet")
    score.add_argument(
        "--weights",
        type=path_flag,
        metavar="PMI_FILE",
        help="PMI weights from `autheval mavic weights` (default: every feature weighs 1)",
    )
    score.add_argument(
        "--config",
        type=path_flag,
        metavar="FILE",
        help="a declared MAVIC config (YAML: composite, lambda_hier, lambda_morph, gate_k, "
        "tversky_alpha, tversky_beta, ontology, ...; default: the paper's values)",
    )
    score.set_defaults(func=cmd_mavic_score)
    weights = add_command(sub, "weights", WEIGHTS_HELP, WEIGHTS_DESCRIPTION)
    weights.add_argument("--input", required=True, type=path_flag, metavar="TRAINING_TABLE", help="the training table")
    weights.add_argument("--output", required=True, type=path_flag, metavar="PMI_FILE", help=".csv or .parquet")
    weights.add_argument(
        "--config", type=path_flag, metavar="FILE", help="a declared MAVIC config (pmi_eps, pmi_floor)"
    )
    weights.set_defaults(func=cmd_mavic_weights)
