"""MAVIC, the reward of DermoGPT's GRPO stage (DermoGPT section 6), as a pure function of
(completions, labels, schemas, weights): no judge model, no torch.

Per completion:

* R_fmt in {0, 1}: the declared tags (`<morph>` holding a JSON object, `<final_diagnosis>`; an optional
  `<think>` first) each once, in the declared order, nothing but white space outside them; the JSON
  follows exactly one declared attribute schema (autheval/data/mavic/schemas.yaml), and that schema is
  the one of the image's modality. An invalid completion is not an error: it scores 0 on every term.
* R_acc in {0, 1}: the final diagnosis is the reference (matched through the ontology: codes or names).
* S_hier: Wu-Palmer similarity of the two diagnoses over the declared ontology (models/ontology.py);
  0 for a diagnosis the ontology does not know.
* S_morph: the PMI-weighted Tversky index of the binarised attributes, TP / (TP + alpha FP + beta FN),
  weights w_f = max(PMI(m_f; y), pmi_floor) for the reference diagnosis y (`pmi_weights`), a feature or
  diagnosis the weights do not cover weighing `default_weight` (so no weights: the plain Tversky index).
  Where every involved weight is 0 (or nothing is present in either): 1 if the two sets are equal, else 0.
* gate = sigmoid(k (S_hier - median of S_hier in the completion's GRPO group)), k = 10.
* reward: the declared composite (`COMPOSITES`; default `gated`,
  R_fmt * (R_acc + lambda_hier S_hier + lambda_morph gate S_morph)).
* advantage: (reward - group mean) / (group standard deviation + advantage_eps), summing to 0 per group.

The per-string work (tags, JSON, fuzzy names) is one pass per completion with memoised name matching;
everything after it runs on arrays (n x F indicator matrices, group statistics by sorting)."""

from __future__ import annotations

import difflib
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autheval.errors import RecordError
from autheval.parse import load_json, load_yaml
from models.ontology import Ontology, load_ontology

SCHEMAS_FILE = files("autheval") / "data" / "mavic" / "schemas.yaml"
NEGATIVE_STATE = "absent"
BINARY_STATES = (NEGATIVE_STATE, "present")
OUTPUT_KEYS = ("r_fmt", "r_acc", "s_hier", "s_morph", "gate", "reward", "advantage")
# The declared composites (the paper's text does not keep its formula; every row names the one used).
COMPOSITES = {
    "gated": "r_fmt * (r_acc + lambda_hier * s_hier + lambda_morph * gate * s_morph)",
    "ungated": "r_fmt * (r_acc + lambda_hier * s_hier + lambda_morph * s_morph)",
    "accuracy": "r_fmt * r_acc",
}


CONFIG_MAX = 1e6  # the largest weight, lambda, gate slope or PMI weight taken


class MavicConfig(BaseModel):
    """The reward's declared constants; defaults are the paper's (weights lambda = 1, k = 10, Tversky
    alpha 0.7 / beta 0.3, PMI eps 1e-5, fuzzy name threshold 0.8)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    composite: Literal["gated", "ungated", "accuracy"] = "gated"
    # every number bounded (CONFIG_MAX), so that the reward's arithmetic cannot overflow to inf or NaN
    lambda_hier: float = Field(1.0, ge=0, le=CONFIG_MAX, allow_inf_nan=False)
    lambda_morph: float = Field(1.0, ge=0, le=CONFIG_MAX, allow_inf_nan=False)
    gate_k: float = Field(10.0, gt=0, le=CONFIG_MAX, allow_inf_nan=False)
    tversky_alpha: float = Field(0.7, ge=0, le=CONFIG_MAX, allow_inf_nan=False)
    tversky_beta: float = Field(0.3, ge=0, le=CONFIG_MAX, allow_inf_nan=False)
    pmi_eps: float = Field(1e-5, gt=0, le=1, allow_inf_nan=False)
    pmi_floor: float = Field(0.0, ge=0, le=CONFIG_MAX, allow_inf_nan=False)  # negative PMI weighs this (>= 0)
    default_weight: float = Field(1.0, ge=0, le=CONFIG_MAX, allow_inf_nan=False)
    fuzzy_threshold: float = Field(0.8, gt=0, le=1, allow_inf_nan=False)
    advantage_eps: float = Field(1e-4, gt=0, le=1, allow_inf_nan=False)  # as TRL's GRPO
    # tags in their required order; `required_tags` must be present, the others may be left out
    tag_order: tuple[str, ...] = ("think", "morph", "final_diagnosis")
    required_tags: tuple[str, ...] = ("morph", "final_diagnosis")
    # modality -> schema name (autheval/data/mavic/schemas.yaml)
    modalities: dict[str, str] = {"dermoscopic": "derm7pt", "clinical": "skincon"}
    ontology: str = "isic2019_risk"  # a built-in ontology (models/ontology.py) or a declared file

    @model_validator(mode="after")
    def _tags(self):
        if "morph" not in self.required_tags or "final_diagnosis" not in self.required_tags:
            raise ValueError("required_tags must include morph and final_diagnosis")
        if len(set(self.tag_order)) != len(self.tag_order) or not set(self.required_tags) <= set(self.tag_order):
            raise ValueError("tag_order must list each tag once, the required ones among them")
        if any(not re.fullmatch(r"[a-z_]+", t) for t in self.tag_order):
            raise ValueError("tag names are lower-case letters and underscores")
        return self

    def formula(self) -> str:
        return COMPOSITES[self.composite]

    def sha256(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def load_config(path: str | Path | None) -> MavicConfig:
    """A declared config (YAML or JSON mapping of MavicConfig's fields), or the defaults."""
    if path is None:
        return MavicConfig()
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as err:
        raise RecordError(source, None, f"cannot be read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise RecordError(source, None, "is not UTF-8 text") from None
    data = load_yaml(text, source, what="a MAVIC config")  # depth, duplicate keys, aliases: one line
    if not isinstance(data, dict):
        raise RecordError(source, None, "must be a mapping of MAVIC config fields")
    try:
        return MavicConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise RecordError(source, ".".join(str(p) for p in first["loc"]) or None, first["msg"]) from None


def normal_name(text: str) -> str:
    """Lower case, spaces and hyphens as underscores: how attribute names and states are compared."""
    return re.sub(r"[\s\-]+", "_", str(text).strip().lower())


@dataclass(frozen=True)
class Schema:
    """One attribute schema: attribute -> its states (the first, `absent`, sets no indicator)."""

    name: str
    modality: str
    attributes: dict[str, tuple[str, ...]]

    def is_binary(self, attribute: str) -> bool:
        return self.attributes[attribute] == BINARY_STATES

    def features(self) -> list[str]:
        """The binarised indicators, in schema order."""
        out = []
        for attribute, states in self.attributes.items():
            if self.is_binary(attribute):
                out.append(attribute)
            else:
                out += [f"{attribute}_{s}" for s in states if s != NEGATIVE_STATE]
        return out

    def feature(self, attribute: str, state: str) -> str | None:
        if state == NEGATIVE_STATE:
            return None
        return attribute if self.is_binary(attribute) else f"{attribute}_{state}"

    def state(self, attribute: str, value) -> str | None:
        """The state a JSON value names, or None: a state name, or true / false for a binary attribute."""
        if isinstance(value, bool):
            return BINARY_STATES[value] if self.is_binary(attribute) else None
        if not isinstance(value, str):
            return None
        state = normal_name(value)
        return state if state in self.attributes[attribute] else None


@dataclass(frozen=True)
class Schemas:
    """The declared schemas, their union of features (one column each) and the modality map."""

    schemas: dict[str, Schema]
    features: tuple[str, ...]
    sha256: str

    def index(self) -> dict[str, int]:
        return {f: i for i, f in enumerate(self.features)}


def parse_schemas(text: str, source: str = "schemas.yaml") -> Schemas:
    data = load_yaml(text, source, what="a schemas file")
    if not isinstance(data, dict) or not data:
        raise RecordError(source, None, "must map each schema name to its modality and attributes")
    schemas, seen = {}, {}
    for name, body in data.items():
        if not isinstance(body, dict) or not isinstance(body.get("modality"), str):
            raise RecordError(source, f"{name}.modality", "each schema names its modality")
        attributes: dict[str, tuple[str, ...]] = {}
        for attribute in body.get("binary", []) or []:
            attributes[normal_name(attribute)] = BINARY_STATES
        for attribute, states in (body.get("categorical", {}) or {}).items():
            states = tuple(normal_name(s) for s in states)
            if not states or states[0] != NEGATIVE_STATE or len(set(states)) != len(states):
                raise RecordError(
                    source,
                    f"{name}.categorical.{attribute}",
                    f"states are distinct and the first is {NEGATIVE_STATE!r}",
                )
            attributes[normal_name(attribute)] = states
        if not attributes:
            raise RecordError(source, name, "a schema has at least one attribute")
        schema = Schema(name=str(name), modality=normal_name(body["modality"]), attributes=attributes)
        for feature in schema.features():
            if feature in seen:
                raise RecordError(source, name, f"feature {feature!r} is also one of schema {seen[feature]!r}")
            seen[feature] = name
        schemas[schema.name] = schema
    return Schemas(schemas=schemas, features=tuple(seen), sha256=hashlib.sha256(text.encode()).hexdigest())


@lru_cache(maxsize=1)
def default_schemas() -> Schemas:
    return parse_schemas(SCHEMAS_FILE.read_text(encoding="utf-8"), "autheval/data/mavic/schemas.yaml")


@lru_cache(maxsize=65536)
def _match_name(name: str, candidates: tuple[str, ...], threshold: float) -> str | None:
    """The schema attribute a completion's name stands for: itself, else the closest by difflib's
    ratio at or above the threshold (ties: the schema's earlier attribute)."""
    key = normal_name(name)
    if key in candidates:
        return key
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=threshold)
    return close[0] if close else None


def match_schema(attributes: dict, schema: Schema, threshold: float) -> dict[str, str] | None:
    """{schema attribute: state} when the JSON object follows `schema` (non-empty; every name matches
    a distinct attribute and every value is one of its states), else None."""
    if not attributes:
        return None
    candidates = tuple(schema.attributes)
    matched: dict[str, str] = {}
    for name, value in attributes.items():
        attribute = _match_name(name, candidates, threshold)
        if attribute is None or attribute in matched:
            return None
        state = schema.state(attribute, value)
        if state is None:
            return None
        matched[attribute] = state
    return matched


def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"<(/?)(" + "|".join(re.escape(t) for t in tags) + r")>")


@dataclass(frozen=True)
class Parsed:
    """What one completion gives: None fields where the format is broken (`rule` says why)."""

    rule: str | None  # None: valid format
    diagnosis: str | None = None
    attributes: dict[str, str] | None = None  # schema attribute -> state, in the modality's schema


def parse_completion(text, modality: str, config: MavicConfig, schemas: Schemas) -> Parsed:
    """Check one completion's format (R_fmt) and read its diagnosis and attributes."""
    if not isinstance(text, str):
        return Parsed("not text")
    blocks: dict[str, str] = {}
    order: list[str] = []
    position, open_tag, open_end = 0, None, 0
    for m in _tag_pattern(config.tag_order).finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if open_tag is None:
            if closing:
                return Parsed(f"</{tag}> without <{tag}>")
            if text[position : m.start()].strip():
                return Parsed("text outside the tags")
            if tag in blocks:
                return Parsed(f"<{tag}> more than once")
            open_tag, open_end = tag, m.end()
        else:
            if not closing or tag != open_tag:
                return Parsed(f"<{tag}> inside <{open_tag}>" if not closing else f"</{tag}> closes <{open_tag}>")
            blocks[tag] = text[open_end : m.start()]
            order.append(tag)
            open_tag, position = None, m.end()
    if open_tag is not None:
        return Parsed(f"<{open_tag}> not closed")
    if text[position:].strip():
        return Parsed("text outside the tags")
    missing = [t for t in config.required_tags if t not in blocks]
    if missing:
        return Parsed(f"<{missing[0]}> missing")
    rank = {t: i for i, t in enumerate(config.tag_order)}
    if [rank[t] for t in order] != sorted(rank[t] for t in order):
        return Parsed(f"tags out of order ({' '.join(order)}; declared {' '.join(config.tag_order)})")
    diagnosis = blocks["final_diagnosis"].strip()
    if not diagnosis:
        return Parsed("empty <final_diagnosis>")
    try:
        attributes = load_json(blocks["morph"], "<morph>")  # a RecordError (ValueError): deep, repeated keys
    except ValueError:
        return Parsed("<morph> is not JSON (or repeats a key)")
    if not isinstance(attributes, dict):
        return Parsed("<morph> is not a JSON object")
    followed = {
        name: m
        for name, s in schemas.schemas.items()
        if (m := match_schema(attributes, s, config.fuzzy_threshold)) is not None
    }
    if len(followed) != 1:
        return Parsed(
            "<morph> follows no declared schema"
            if not followed
            else f"<morph> follows several schemas ({', '.join(followed)})"
        )
    ((name, matched),) = followed.items()
    if name != config.modalities[modality]:
        return Parsed(f"<morph> follows {name}, not the {modality} schema {config.modalities[modality]}")
    return Parsed(None, diagnosis, matched)


# ---------------------------------------------------------------- PMI weights


@dataclass(frozen=True)
class PmiWeights:
    """w[d, f] for diagnosis d and feature f (a dense grid over the training table's diagnoses and the
    schemas' features); `pmi` beside it, `sha256` of the table it was read from."""

    diagnoses: tuple[str, ...]
    features: tuple[str, ...]
    pmi: np.ndarray
    weight: np.ndarray
    sha256: str = ""


def _reference_indicators(
    attributes_per_row, modality, schemas: Schemas, config: MavicConfig, source: str, column: str
) -> np.ndarray:
    """The n x F indicator matrix of labelled attributes (exact names after normal_name: labels are
    not fuzzy). A name or state the modality's schema lacks is one RecordError line."""
    index = schemas.index()
    out = np.zeros((len(attributes_per_row), len(schemas.features)), dtype=bool)
    for i, (attributes, mod) in enumerate(zip(attributes_per_row, modality)):
        schema = schemas.schemas[config.modalities[mod]]
        if not isinstance(attributes, Mapping):
            raise RecordError(source, column, "must be a JSON object of attribute -> state", f"row {i + 1}")
        for name, value in attributes.items():
            attribute = normal_name(name)
            if attribute not in schema.attributes:
                raise RecordError(
                    source,
                    column,
                    f"{name!r} is not an attribute of the {schema.name} schema ({mod} images)",
                    f"row {i + 1}",
                )
            state = schema.state(attribute, value)
            if state is None:
                raise RecordError(
                    source,
                    column,
                    f"{value!r} is not a state of {attribute} ({', '.join(schema.attributes[attribute])})",
                    f"row {i + 1}",
                )
            feature = schema.feature(attribute, state)
            if feature is not None:
                out[i, index[feature]] = True
    return out


def check_modalities(modality: Sequence, config: MavicConfig, source: str, column: str = "modality") -> list[str]:
    out = []
    for i, value in enumerate(modality):
        name = normal_name(value) if isinstance(value, str) else None
        if name not in config.modalities:
            raise RecordError(
                source,
                column,
                f"unknown modality; expected one of {', '.join(config.modalities)}",
                f"row {i + 1}, value {value!r}",
            )
        out.append(name)
    return out


def pmi_weights(
    attributes: Sequence[Mapping],
    modality: Sequence[str],
    diagnosis: Sequence[str],
    *,
    config: MavicConfig | None = None,
    schemas: Schemas | None = None,
    source: str = "training table",
) -> PmiWeights:
    """PMI(m_f; y) = log((p(m_f = 1, y) + eps) / (p(m_f = 1) p(y) + eps)) over a training table of
    (attributes, modality, diagnosis), for every schema feature and every diagnosis in the table."""
    config = config or MavicConfig()
    schemas = schemas or default_schemas()
    if not (len(attributes) == len(modality) == len(diagnosis)) or len(diagnosis) == 0:
        raise RecordError(source, None, "needs at least one row, with attributes, modality and diagnosis each")
    modality = check_modalities(modality, config, source)
    for i, d in enumerate(diagnosis):
        if not isinstance(d, str) or not d.strip():
            raise RecordError(source, "diagnosis", "must be a non-empty diagnosis", f"row {i + 1}")
    m = _reference_indicators(attributes, modality, schemas, config, source, "attributes")
    labels, y = np.unique(np.array([d.strip().upper() for d in diagnosis]), return_inverse=True)
    n = float(len(y))
    onehot = np.zeros((len(y), len(labels)))
    onehot[np.arange(len(y)), y] = 1.0
    p_fy = onehot.T @ m.astype(float) / n  # D x F
    p_f = m.mean(axis=0)
    p_y = onehot.mean(axis=0)
    eps = config.pmi_eps
    pmi = np.log((p_fy + eps) / (p_y[:, None] * p_f[None, :] + eps))
    return PmiWeights(
        diagnoses=tuple(labels.tolist()), features=schemas.features, pmi=pmi, weight=np.maximum(pmi, config.pmi_floor)
    )


def weights_table(weights: PmiWeights):
    """The long (diagnosis, feature, pmi, weight) table, diagnoses and features in order."""
    import pyarrow as pa

    d, f = np.meshgrid(np.arange(len(weights.diagnoses)), np.arange(len(weights.features)), indexing="ij")
    return pa.table(
        {
            "diagnosis": pa.array(np.array(weights.diagnoses, dtype=object)[d.ravel()].tolist(), pa.string()),
            "feature": pa.array(np.array(weights.features, dtype=object)[f.ravel()].tolist(), pa.string()),
            "pmi": pa.array(weights.pmi.ravel(), pa.float64()),
            "weight": pa.array(weights.weight.ravel(), pa.float64()),
        }
    )


def weights_from_table(table, source: str = "weights", schemas: Schemas | None = None) -> PmiWeights:
    """A weights table (diagnosis, feature, weight) back into the grid; a feature no schema has, a
    repeated pair or a weight that is negative or not finite is one RecordError line."""
    schemas = schemas or default_schemas()
    for column in ("diagnosis", "feature", "weight"):
        if column not in table.column_names:
            raise RecordError(source, column, "missing column (a weights table has diagnosis, feature, weight)")
    diagnosis = table.column("diagnosis").to_pylist()
    feature = table.column("feature").to_pylist()
    try:
        weight = np.array([float(w) if w is not None else np.nan for w in table.column("weight").to_pylist()])
    except (TypeError, ValueError):
        raise RecordError(source, "weight", "must be numbers") from None
    index = schemas.index()
    labels = tuple(sorted({str(d).strip().upper() for d in diagnosis if d is not None}))
    row = {d: i for i, d in enumerate(labels)}
    grid = np.full((len(labels), len(schemas.features)), np.nan)
    for i, (d, f, w) in enumerate(zip(diagnosis, feature, weight)):
        if d is None or not str(d).strip():
            raise RecordError(source, "diagnosis", "must be a diagnosis", f"row {i + 1}")
        if f not in index:
            raise RecordError(
                source, "feature", "is not a feature of the declared schemas", f"row {i + 1}, value {f!r}"
            )
        if not math.isfinite(w) or not 0 <= w <= CONFIG_MAX:
            rule = f"must be a finite number >= 0 and at most {CONFIG_MAX:g}"
            raise RecordError(source, "weight", rule, f"row {i + 1}, value {w!r}")
        cell = (row[str(d).strip().upper()], index[f])
        if not np.isnan(grid[cell]):
            raise RecordError(source, "feature", "a (diagnosis, feature) pair is given twice", f"row {i + 1}")
        grid[cell] = w
    return PmiWeights(diagnoses=labels, features=schemas.features, pmi=np.full_like(grid, np.nan), weight=grid)


def load_weights(path: str | Path) -> PmiWeights:
    """A weights file written by `autheval mavic weights` (CSV or Parquet)."""
    from autheval.io import file_sha256, read_table

    weights = weights_from_table(read_table(path), str(path))
    return PmiWeights(weights.diagnoses, weights.features, weights.pmi, weights.weight, file_sha256(path))


# ---------------------------------------------------------------- the reward


def tversky(pred: np.ndarray, ref: np.ndarray, w: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Row-wise weighted Tversky index of two n x F indicator matrices; see the module docstring for
    an empty denominator."""
    tp = (w * (pred & ref)).sum(axis=1)
    fp = (w * (pred & ~ref)).sum(axis=1)
    fn = (w * (~pred & ref)).sum(axis=1)
    denominator = tp + alpha * fp + beta * fn
    equal = (pred == ref).all(axis=1).astype(float)
    return np.divide(tp, denominator, out=equal, where=denominator > 0)


def group_statistics(group_id: Sequence, values: np.ndarray):
    """Per element: its group's median, mean and population standard deviation of `values`."""
    _, inverse, counts = np.unique(
        np.asarray(group_id, dtype=object).astype(str), return_inverse=True, return_counts=True
    )
    order = np.lexsort((values, inverse))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ordered = values[order]
    median = 0.5 * (ordered[starts + (counts - 1) // 2] + ordered[starts + counts // 2])
    mean = np.bincount(inverse, weights=values) / counts
    deviation = values - mean[inverse]
    std = np.sqrt(np.bincount(inverse, weights=deviation**2) / counts)
    return median[inverse], mean[inverse], std[inverse]


def score_completions(
    completions: Sequence[str],
    modality: Sequence[str],
    reference_diagnosis: Sequence[str],
    reference_attributes: Sequence[Mapping[str, str]],
    group_id: Sequence,
    *,
    weights: PmiWeights | None = None,
    config: MavicConfig | None = None,
    ontology: Ontology | None = None,
    schemas: Schemas | None = None,
    source: str = "score_completions",
    with_rules: bool = False,
) -> dict[str, np.ndarray]:
    """MAVIC per completion: {r_fmt, r_acc, s_hier, s_morph, gate, reward, advantage} as float64
    arrays (`format_rule` too, with `with_rules`: why r_fmt is 0, None where it is 1). Bad labels (an
    unknown modality or reference diagnosis, an attribute the schema lacks) are one RecordError line
    naming `source`, the column and the row; a badly formatted completion is not an error."""
    config = config or MavicConfig()
    schemas = schemas or default_schemas()
    ontology = ontology or load_ontology(config.ontology)
    n = len(completions)
    if not (len(modality) == len(reference_diagnosis) == len(reference_attributes) == len(group_id) == n):
        raise ValueError(
            "completions, modality, reference_diagnosis, reference_attributes and group_id must have the same length"
        )
    for column, values in (
        ("group_id", group_id),
        ("modality", modality),
        ("reference_diagnosis", reference_diagnosis),
    ):
        for i, value in enumerate(values):
            if isinstance(value, str) and (value != value.strip() or not value.isprintable()):
                raise RecordError(
                    source,
                    column,
                    "must not begin or end with whitespace nor hold a control character (never stripped: "
                    "'g1 ' beside 'g1' would be two values)",
                    f"row {i + 1}, value {value!r}",
                )
    for name in set(config.modalities.values()):
        if name not in schemas.schemas:
            raise RecordError(source, "modality", f"the config names schema {name!r}, which is not declared")
    modality = check_modalities(modality, config, source)
    for i, d in enumerate(reference_diagnosis):
        if ontology.resolve(d) is None:
            raise RecordError(
                source,
                "reference_diagnosis",
                f"not a diagnosis of the {ontology.name} ontology",
                f"row {i + 1}, value {d!r}",
            )
    ref = _reference_indicators(reference_attributes, modality, schemas, config, source, "reference_attributes")

    parsed = [parse_completion(c, m, config, schemas) for c, m in zip(completions, modality)]
    r_fmt = np.array([p.rule is None for p in parsed], dtype=float)
    valid = r_fmt == 1.0
    index = schemas.index()
    pred = np.zeros_like(ref)
    for i, p in enumerate(parsed):
        if p.rule is None:
            schema = schemas.schemas[config.modalities[modality[i]]]
            for attribute, state in p.attributes.items():
                feature = schema.feature(attribute, state)
                if feature is not None:
                    pred[i, index[feature]] = True

    predicted_node = [ontology.resolve(p.diagnosis) if p.rule is None else None for p in parsed]
    reference_node = [ontology.resolve(d) for d in reference_diagnosis]
    r_acc = np.array([a is not None and a == b for a, b in zip(predicted_node, reference_node)], dtype=float)
    s_hier = np.nan_to_num(
        ontology.similarity([p.diagnosis if p.rule is None else None for p in parsed], reference_diagnosis), nan=0.0
    )

    w = np.full(ref.shape, config.default_weight)
    if weights is not None:
        rows = {d: i for i, d in enumerate(weights.diagnoses)}
        columns = np.array([index[f] for f in weights.features])
        for i, d in enumerate(reference_diagnosis):
            r = rows.get(str(d).strip().upper())
            if r is not None:
                given = weights.weight[r]
                known = ~np.isnan(given)
                w[i, columns[known]] = given[known]
    s_morph = np.where(valid, tversky(pred, ref, w, config.tversky_alpha, config.tversky_beta), 0.0)

    median, _, _ = group_statistics(group_id, s_hier)
    with np.errstate(over="ignore"):  # a steep gate's exp overflows to inf: the gate is then 0, its limit
        gate = 1.0 / (1.0 + np.exp(-config.gate_k * (s_hier - median)))
    if config.composite == "gated":
        reward = r_fmt * (r_acc + config.lambda_hier * s_hier + config.lambda_morph * gate * s_morph)
    elif config.composite == "ungated":
        reward = r_fmt * (r_acc + config.lambda_hier * s_hier + config.lambda_morph * s_morph)
    else:
        reward = r_fmt * r_acc
    _, mean, std = group_statistics(group_id, reward)
    advantage = (reward - mean) / (std + config.advantage_eps)
    out = dict(zip(OUTPUT_KEYS, (r_fmt, r_acc, s_hier, s_morph, gate, reward, advantage)))
    for key, values in out.items():
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:  # not reached within CONFIG_MAX; kept as a refusal, never a NaN reward
            raise RecordError(
                source, key, "is not a finite number: lower the config's weights and lambdas", f"row {bad[0] + 1}"
            )
    if with_rules:
        out["format_rule"] = np.array([p.rule for p in parsed], dtype=object)
    return out
