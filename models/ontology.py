"""Diagnosis ontologies for S_hier, the hierarchical similarity of a proposed diagnosis (DermoGPT
sections 4 and 6): S_hier(a, b) = 2 * depth(LCA(path_a, path_b)) / (|path_a| + |path_b|) (Wu-Palmer),
paths from the root (depth 1) down to the node.

Two ontologies ship:

* `isic2019_risk` (the default): root -> risk level -> diagnosis, the risk levels of
  `autheval.raw.ingest.RISK` (the same tree as sql/scoring/scores_hierarchical.sql: same diagnosis 1, same risk
  level 2/3, else 1/3);
* `isic_archive`: the ISIC Archive's hierarchical diagnosis taxonomy, read from the field's own package
  (`isic-metadata`, `DiagnosisEnum`: colon-joined paths Benign / Indeterminate / Malignant -> ... up to
  five levels), with the ISIC 2019 codes mapped onto its nodes by the declared file
  `autheval/data/ontology/isic_archive.yaml`. Any node of the taxonomy may also be named directly, by its
  full value or by its last part when that is unique.

A user's ontology is a YAML file of the same form (`taxonomy: declared`, each label with its path below
the root). Diagnoses are matched by code (case-insensitive) or by the spelled-out names the ingest knows
(`autheval.vocabulary.DIAGNOSIS_NAMES`, e.g. "melanoma")."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from autheval.errors import RecordError
from autheval.parse import load_yaml

ROOT = "root"
DEFAULT_ONTOLOGY = "isic2019_risk"
ISIC_ARCHIVE_FILE = files("autheval") / "data" / "ontology" / "isic_archive.yaml"
BUILTIN = ("isic2019_risk", "isic_archive")
SEPARATOR = ":"  # the ISIC Archive's own separator of a node's path


class OntologyFile(BaseModel):
    """A declared ontology file: its name, where its tree comes from, and each label's node."""

    model_config = ConfigDict(extra="forbid")
    name: str
    taxonomy: Literal["isic-metadata", "declared"]
    # label (a diagnosis code) -> its node: a colon-joined path below the root, or a list of its parts
    labels: dict[str, str | list[str]]


@dataclass(frozen=True)
class Ontology:
    """A rooted tree of diagnoses. `nodes` maps a node's key (its colon-joined path below the root) to
    its path from the root, root included; `labels` maps an upper-case code to a node key."""

    name: str
    nodes: dict[str, tuple[str, ...]]
    labels: dict[str, str]
    version: str  # what the tree and labels are: the file's SHA-256 (and the package's version)
    _terminals: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        last: dict[str, list[str]] = {}
        for key, path in self.nodes.items():
            last.setdefault(path[-1].casefold(), []).append(key)
        object.__setattr__(self, "_terminals", {name: keys[0] for name, keys in last.items() if len(keys) == 1})

    def resolve(self, diagnosis: str | None, any_node: bool = False) -> str | None:
        """The node a diagnosis names, or None: a label code (any case) or a spelled-out ISIC 2019 name;
        with `any_node`, also a node's full key or a node's last part where no other node ends in it
        (MAVIC does not take those: an inner node such as 'Malignant' would earn more Wu-Palmer credit
        than a wrong sibling diagnosis)."""
        if diagnosis is None:
            return None
        from autheval.vocabulary import DIAGNOSIS_NAMES

        text = str(diagnosis).strip()
        code = text.upper()
        if code in self.labels:
            return self.labels[code]
        spelled = DIAGNOSIS_NAMES.get(text.casefold())
        if spelled in self.labels:
            return self.labels[spelled]
        if not any_node:
            return None
        if text in self.nodes:
            return text
        return self._terminals.get(text.casefold())

    def path(self, diagnosis: str) -> tuple[str, ...]:
        node = self.resolve(diagnosis, any_node=True)
        if node is None:
            raise KeyError(f"{diagnosis!r} is not a diagnosis of the {self.name} ontology")
        return self.nodes[node]

    def similarity_of_nodes(self, a: str, b: str) -> float:
        """Wu-Palmer similarity of two node keys."""
        pa, pb = self.nodes[a], self.nodes[b]
        common = 0
        for x, y in zip(pa, pb):
            if x != y:
                break
            common += 1
        return 2.0 * common / (len(pa) + len(pb))

    def similarity(
        self, predicted: Sequence[str | None], reference: Sequence[str | None], any_node: bool = False
    ) -> np.ndarray:
        """S_hier per pair (float64); NaN where either diagnosis is not in the ontology (see `resolve`
        for `any_node`). Each distinct pair is computed once."""
        pred = [self.resolve(d, any_node) for d in predicted]
        ref = [self.resolve(d, any_node) for d in reference]
        if len(pred) != len(ref):
            raise ValueError(f"{len(pred)} predicted and {len(ref)} reference diagnoses")
        cache: dict[tuple[str, str], float] = {}
        out = np.full(len(pred), np.nan)
        for i, (a, b) in enumerate(zip(pred, ref)):
            if a is not None and b is not None:
                if (a, b) not in cache:
                    cache[(a, b)] = self.similarity_of_nodes(a, b)
                out[i] = cache[(a, b)]
        return out


def _tree(paths: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Every node of the union of `paths` (each path below the root), keyed by its colon-joined path."""
    nodes = {}
    for parts in paths.values():
        for depth in range(1, len(parts) + 1):
            nodes[SEPARATOR.join(parts[:depth])] = (ROOT, *parts[:depth])
    return nodes


def risk_ontology() -> Ontology:
    """root -> risk level -> diagnosis, over the diagnosis -> risk map (the ingest's RISK)."""
    from autheval.vocabulary import DIAGNOSIS_RISK

    paths = {code: (level, code) for code, level in DIAGNOSIS_RISK.items()}
    text = "\n".join(f"{code}:{level}" for code, level in sorted(DIAGNOSIS_RISK.items()))
    return Ontology(
        name="isic2019_risk",
        nodes=_tree(paths),
        labels={code: SEPARATOR.join(p) for code, p in paths.items()},
        version=hashlib.sha256(text.encode()).hexdigest(),
    )


def _isic_archive_nodes(source: str) -> tuple[dict[str, tuple[str, ...]], str]:
    """The ISIC Archive's diagnosis tree from the isic-metadata package, and the package's version."""
    try:
        from isic_metadata.diagnosis_hierarchical import DiagnosisEnum
    except ImportError as err:
        raise RecordError(source, "taxonomy", "isic-metadata is not installed (pip install -e '.[raw]')") from err
    from importlib.metadata import version

    values = {member.value: tuple(member.value.split(SEPARATOR)) for member in DiagnosisEnum}
    return _tree(values), version("isic-metadata")


def parse_ontology(text: str, source: str = "ontology.yaml") -> Ontology:
    """Validate a declared ontology file; one RecordError line naming the key on the first problem."""
    data = load_yaml(text, source, what="an ontology file")  # depth, duplicate keys, aliases: one line
    if not isinstance(data, dict):
        raise RecordError(source, None, "must be a YAML mapping with name, taxonomy and labels")
    try:
        declared = OntologyFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or None
        raise RecordError(source, key, first["msg"]) from None
    if not declared.labels:
        raise RecordError(source, "labels", "must name at least one label")
    paths: dict[str, tuple[str, ...]] = {}
    for code, node in declared.labels.items():
        parts = tuple(node.split(SEPARATOR)) if isinstance(node, str) else tuple(node)
        if not parts or any(not p.strip() or p != p.strip() or SEPARATOR in p for p in parts):
            raise RecordError(
                source,
                f"labels.{code}",
                f"a path of non-empty names without surrounding spaces or '{SEPARATOR}' inside a name",
                repr(node),
            )
        if code != code.strip().upper() or not code:
            raise RecordError(source, f"labels.{code}", "a label is an upper-case code without spaces")
        paths[code] = parts
    digest = hashlib.sha256(text.encode()).hexdigest()
    if declared.taxonomy == "isic-metadata":
        nodes, package_version = _isic_archive_nodes(source)
        for code, parts in paths.items():
            if SEPARATOR.join(parts) not in nodes:
                raise RecordError(
                    source,
                    f"labels.{code}",
                    f"is not a node of the ISIC Archive's diagnosis taxonomy (isic-metadata {package_version})",
                    SEPARATOR.join(parts),
                )
        version = f"sha256:{digest}; isic-metadata {package_version}"
    else:
        nodes, version = _tree(paths), f"sha256:{digest}"
    return Ontology(
        name=declared.name,
        nodes=nodes,
        labels={code: SEPARATOR.join(parts) for code, parts in paths.items()},
        version=version,
    )


@cache
def builtin_ontology(name: str) -> Ontology:
    """A built-in ontology, built once per process (GRPO scores every step with it)."""
    if name == "isic2019_risk":
        return risk_ontology()
    return parse_ontology(ISIC_ARCHIVE_FILE.read_text(encoding="utf-8"), "isic_archive.yaml")


def load_ontology(name_or_path: str | Path | None = None) -> Ontology:
    """A built-in ontology by name (`isic2019_risk`, the default, or `isic_archive`) or a declared file."""
    if name_or_path is None or str(name_or_path) in BUILTIN:
        return builtin_ontology(str(name_or_path or DEFAULT_ONTOLOGY))
    path = Path(name_or_path)
    if not path.is_file():
        raise RecordError(str(path), None, f"not a file, nor a built-in ontology ({', '.join(BUILTIN)})")
    return parse_ontology(path.read_text(encoding="utf-8"), str(path))
