"""Every rule of a frozen split's validation (AuthEval spec 1.11, sql/ingest/raw_freeze_checks.sql), each fed
a freeze that breaks it and nothing else: the first broken rule is named, one line, with an example."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autheval.errors import RecordError
from autheval.raw.splits import validate_freeze

COMPUTED = pa.table({"image_id": ["i1", "i2", "i3", "i4"], "cluster_id": ["k1", "k1", "k2", "k3"]})
GOOD = [("i1", "k1", "train"), ("i2", "k1", "train"), ("i3", "k2", "test"), ("i4", "k3", "val")]


def freeze(rows) -> pa.Table:
    return pa.table(
        {
            "image_id": pa.array([r[0] for r in rows], pa.string()),
            "cluster_id": pa.array([r[1] for r in rows], pa.string()),
            "split": pa.array([r[2] for r in rows], pa.string()),
        }
    )


def test_a_good_freeze_is_returned():
    table = validate_freeze(freeze(GOOD), COMPUTED)
    assert table.to_pylist() == [{"image_id": i, "cluster_id": c, "split": s} for i, c, s in GOOD]


CASES = [
    ("empty image id", [*GOOD, (None, "k9", "train")], "image_id", "must not be empty", "data row 5"),
    ("duplicate image id", [*GOOD, ("i4", "k3", "val")], "image_id", "must be unique", "'i4'"),
    ("bad split value", [*GOOD[:3], ("i4", "k3", "holdout")], "split", "must be one of train, val, test", "'holdout'"),
    ("image not ingested", [*GOOD, ("i5", "k4", "train")], "image_id", "is not in the ingested images", "'i5'"),
    ("ingested image missing", GOOD[:3], "image_id", "an ingested image is missing from the freeze", "'i4'"),
    ("cluster id differs", [*GOOD[:3], ("i4", "k2", "val")],
     "cluster_id", "differs from the cluster id recomputed", "frozen k2, recomputed k3"),
    ("cluster in two splits", [GOOD[0], ("i2", "k1", "val"), *GOOD[2:]],
     "split", "a cluster spans more than one split", "k1 in train,val"),
]  # fmt: skip


@pytest.mark.parametrize("label,rows,column,rule,example", CASES, ids=[c[0] for c in CASES])
def test_each_broken_rule_is_named(label, rows, column, rule, example):
    with pytest.raises(RecordError) as err:
        validate_freeze(freeze(rows), COMPUTED, source="split_freeze.csv")
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"split_freeze.csv: column '{column}': {rule}"), message
    assert example in message, message


def test_an_extra_image_is_refused_even_when_everything_else_agrees():
    """Rule 4 alone: the freeze holds every ingested image with the right cluster and split, plus one
    more. No other rule sees it (it has no recomputed cluster and crosses no split)."""
    with pytest.raises(RecordError, match="'i9'.*") as err:
        validate_freeze(freeze([*GOOD, ("i9", "k9", "test")]), COMPUTED)
    assert "is not in the ingested images" in str(err.value)
