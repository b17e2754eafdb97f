"""The project's words, defined once: actions, risk levels, their risk scores, the diagnoses' risk
levels and names, the `proposals` contract and the bootstrap schemes (AuthEval spec 0.1, 5.5; design:
estimators in SQL).

Plain Python, so that the command line's parser (and `--help`) can read it without numpy, DuckDB or
pyarrow; the two Arrow schemas are built on first use (`PROPOSALS_SCHEMA`, `MODEL_PROPOSALS_SCHEMA`).
"""

from __future__ import annotations

ACTIONS = ("a0", "a1", "a2", "a3")  # ordinal: index = action level; action k = risk level k (spec 0.1)
RISK_LEVELS = ("very_low", "low", "moderate", "high")  # index = ideal action level
RISK_SCORES = (0.10, 0.38, 0.64, 0.90)  # RS: expected risk score s = p . RS, per risk level (spec 0.1)
# Each ISIC 2019 diagnosis's risk level (AKIEC: HAM10000's name for AK) and the spelled-out names of
# ISIC-Archive / HAM10000-style files: the ingest's, here so that the MAVIC ontology (models/ontology.py)
# reads them without the ingest's DuckDB
DIAGNOSIS_RISK = {
    "NV": "very_low",
    "VASC": "very_low",
    "DF": "very_low",
    "BKL": "low",
    "AK": "moderate",
    "AKIEC": "moderate",
    "BCC": "moderate",
    "SCC": "high",
    "MEL": "high",
}
DIAGNOSIS_NAMES = {
    "melanoma": "MEL",
    "nevus": "NV",
    "melanocytic nevus": "NV",
    "melanocytic nevi": "NV",
    "basal cell carcinoma": "BCC",
    "actinic keratosis": "AK",
    "actinic keratoses": "AK",
    "actinic keratoses and intraepithelial carcinoma": "AKIEC",
    "intraepithelial carcinoma": "AKIEC",
    "bowen's disease": "AKIEC",
    "benign keratosis": "BKL",
    "benign keratosis-like lesions": "BKL",
    "pigmented benign keratosis": "BKL",
    "seborrheic keratosis": "BKL",
    "solar lentigo": "BKL",
    "lichenoid keratosis": "BKL",
    "lentigo nos": "BKL",
    "lichen planus like keratosis": "BKL",
    "dermatofibroma": "DF",
    "vascular lesion": "VASC",
    "vascular lesions": "VASC",
    "squamous cell carcinoma": "SCC",
}
PROBABILITY_COLUMNS = tuple(f"p_{level}" for level in RISK_LEVELS)
PROBABILITY_SUM_TOLERANCE = 1e-6  # the four probabilities of a proposal sum to 1 within this
SCHEMES = ("reference", "evaluator", "poisson")  # the bootstrap schemes, each named on every output row
# schemes of records whose cluster ids name their site ('<site>:<id>'): poisson weights keyed by site, the
# replicates a hub pools from site exports (autheval/estimation/by_site.py); in process only
SITE_KEYED_SCHEMES = ("poisson_by_site",)
SEED_MAX = 2**62 - 1  # the largest seed a command or an export takes (seeds are hashed with 62 bits)
POOLED = "all"  # the site, model version (or period) of rows pooled over every one: no name may be it
NAME_RULES = (  # (rule broken, test) of a name: a site, model version, batch, analysis (name_problem)
    ("must not be empty or blank", lambda v: not v.strip()),
    (
        "must not begin or end with whitespace (it would name another one than the same name without it)",
        lambda v: v != v.strip(),
    ),
    ("must not contain control characters (a line break, a tab)", lambda v: any(not c.isprintable() for c in v)),
    (
        f"{POOLED!r} names the rows pooled over every one (in any case): give another name",
        lambda v: v.lower() == POOLED,
    ),
)


def name_problem(value: str) -> str | None:
    """Why `value` cannot name a site, model version, batch or analysis (None: it can): blank, surrounding
    whitespace (`site-1 ` beside `site-1` would be two sites), a control character, or the pooled rows'
    name `all` (`ALL`, `All` too). One rule for every place a name enters."""
    return next((rule for rule, broken in NAME_RULES if broken(value)), None)


# The AuthEval log schema (a record per case), defined once for the readers (autheval.records.schema) and
# the simulated deployment's logs (autheval.monitoring.deployment_sim), which add their own columns.
LOG_COLUMNS = (
    "case_id",
    "cluster_id",
    "proposed_action",
    "executed_action",
    "utility_executed_local",
    "utility_proposed_local",
    "utility_proposed_global",
)

# The `proposals` contract, every mechanism's (file-provided or model-made): (column, Arrow type name).
PROPOSALS_COLUMNS = (
    ("mechanism", "string"),
    ("image_id", "string"),
    ("slate", "list<string>"),
    ("a_head", "string"),
    *[(column, "float64") for column in PROBABILITY_COLUMNS],
    ("diagnosis", "string"),
    ("source", "string"),
)


def _schema(columns):
    import pyarrow as pa

    types = {"string": pa.string(), "float64": pa.float64(), "list<string>": pa.list_(pa.string())}
    return pa.schema([(name, types[kind]) for name, kind in columns])


def __getattr__(name: str):
    """The Arrow schemas, built when first asked for (pyarrow is not imported before)."""
    if name == "PROPOSALS_SCHEMA":
        value = _schema(PROPOSALS_COLUMNS)
    elif name == "MODEL_PROPOSALS_SCHEMA":
        # a model's own table proposes no diagnosis (autheval.proposals.proposals_file.as_contract adds it as null)
        value = _schema([c for c in PROPOSALS_COLUMNS if c[0] != "diagnosis"])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
