"""Diagnosis ontologies for S_hier (models/ontology.py): the shallow root -> risk level -> diagnosis tree
(the same numbers as sql/scoring/scores_hierarchical.sql) and the ISIC Archive's taxonomy read from isic-metadata,
with the ISIC 2019 codes mapped onto its nodes; Wu-Palmer on known pairs; declared files refused in one
line naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from autheval.errors import RecordError
from models.ontology import ROOT, load_ontology, parse_ontology

CODES = ("MEL", "NV", "BCC", "AK", "BKL", "DF", "VASC", "SCC")


def test_risk_ontology_gives_the_sql_scores_numbers():
    risk = load_ontology()
    s = risk.similarity(["MEL", "SCC", "NV", "melanoma", "XYZ", None], ["MEL"] * 6)
    assert s[:4].tolist() == pytest.approx([1.0, 2 / 3, 1 / 3, 1.0], abs=1e-15)
    assert np.isnan(s[4]) and np.isnan(s[5])  # not a diagnosis of the ontology / nothing proposed
    assert risk.path("BCC") == (ROOT, "moderate", "BCC")


def test_isic_archive_tree_comes_from_the_package():
    from isic_metadata.diagnosis_hierarchical import DiagnosisEnum

    isic = load_ontology("isic_archive")
    values = {m.value for m in DiagnosisEnum}
    assert set(isic.nodes) == values  # every node of the package's taxonomy, and only those (below the root)
    assert "isic-metadata 4.12.0" in isic.version
    for code in CODES:
        node = isic.labels[code]
        assert node in values
        assert isic.path(code) == (ROOT, *node.split(":"))


def test_isic_archive_similarity_on_known_pairs():
    isic = load_ontology("isic_archive")

    def s(a, b):
        return float(isic.similarity([a], [b])[0])

    # melanoma and nevus share only the root: the Archive splits Benign / Malignant before melanocytic
    assert isic.path("MEL") == (ROOT, "Malignant", "Malignant melanocytic proliferations (Melanoma)")
    assert isic.path("NV") == (ROOT, "Benign", "Benign melanocytic proliferations", "Nevus")
    assert s("MEL", "NV") == pytest.approx(2 * 1 / (3 + 4))
    assert s("MEL", "SCC") == pytest.approx(2 * 2 / (3 + 4))  # both Malignant
    assert s("BCC", "SCC") == pytest.approx(2 * 2 / (4 + 4))
    assert s("BKL", "VASC") == pytest.approx(2 * 2 / (3 + 3))  # both Benign, different families
    assert s("NV", "AK") == pytest.approx(2 * 1 / (4 + 4))  # Benign vs Indeterminate
    assert s("NV", "NV") == 1.0
    # a finer Archive node (named directly) under a code's node: the LCA is the code's node
    assert float(isic.similarity(["Melanoma in situ"], ["MEL"], any_node=True)[0]) == pytest.approx(2 * 3 / (4 + 3))
    assert np.isnan(isic.similarity(["Melanoma in situ"], ["MEL"])[0])  # MAVIC's answers are codes or names
    matrix = np.array([[s(a, b) for b in CODES] for a in CODES])
    assert np.allclose(matrix, matrix.T) and np.all(np.diag(matrix) == 1.0)
    assert np.all(matrix[~np.eye(len(CODES), dtype=bool)] < 1.0)


def test_a_declared_ontology_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\ntaxonomy: declared\nlabels:\n  MEL: [malignant, melanocytic, MEL]\n"
        "  NV: benign:melanocytic:NV\n  BCC: [malignant, keratinocytic, BCC]\n"
    )
    mine = load_ontology(path)
    assert mine.name == "mine" and mine.version.startswith("sha256:")
    assert float(mine.similarity(["MEL"], ["BCC"])[0]) == pytest.approx(2 * 2 / 8)
    assert float(mine.similarity(["MEL"], ["NV"])[0]) == pytest.approx(2 * 1 / 8)


@pytest.mark.parametrize(
    "text, key",
    [
        ("name: x\ntaxonomy: isic-metadata\nlabels:\n  MEL: 'Malignant:Not a node'\n", "labels.MEL"),
        ("name: x\ntaxonomy: elsewhere\nlabels:\n  MEL: a\n", "taxonomy"),
        ("name: x\ntaxonomy: declared\nlabels:\n  MEL: 'a::b'\n", "labels.MEL"),
        ("name: x\ntaxonomy: declared\nlabels:\n  mel: a\n", "labels.mel"),
        ("name: x\ntaxonomy: declared\nlabels: {}\n", "labels"),
        ("name: x\ntaxonomy: declared\nlabels:\n  MEL: a\nextra: 1\n", "extra"),
    ],
)
def test_a_broken_ontology_file_is_one_line_naming_the_key(text, key):
    with pytest.raises(RecordError) as err:
        parse_ontology(text, "bad.yaml")
    assert err.value.column == key and "\n" not in str(err.value) and str(err.value).startswith("bad.yaml")


def test_an_ontology_that_is_neither_built_in_nor_a_file(tmp_path):
    with pytest.raises(RecordError, match="nor a built-in ontology"):
        load_ontology(tmp_path / "missing.yaml")
