"""S_hier (DermoGPT section 4): Wu-Palmer similarity of a proposed diagnosis over root -> risk -> diagnosis,
a secondary score beside U_z that never changes the utilities."""

from __future__ import annotations

import pyarrow as pa
import pytest

from autheval.raw.ingest import RISK
from warehouse.sql import connect, load_sql


def test_similarity_by_depth_of_the_lowest_common_ancestor():
    con = connect()
    ids = ["i1", "i2", "i3", "i4", "i5"]
    con.register(
        "review_scores",
        pa.table({"analysis": ["m / mixed"] * 5, "image_id": ids, "u_local_head": [-1.0, -2.0, -3.0, -4.0, -5.0]}),
    )
    con.register("selections", pa.table({"analysis": ["m / mixed"] * 5, "mechanism": ["m"] * 5, "image_id": ids}))
    con.register(
        "proposals",
        pa.table(
            {
                "mechanism": ["m"] * 5,
                "image_id": ["i1", "i2", "i3", "i4", "i5"],
                "diagnosis": ["MEL", "SCC", "NV", None, "BKL"],
            }
        ),
    )
    con.register(
        "images",
        pa.table({"image_id": ["i1", "i2", "i3", "i4", "i5"], "diagnosis": ["MEL", "MEL", "MEL", "MEL", None]}),
    )
    con.register("diagnosis_risk", pa.table({"diagnosis": list(RISK), "risk_stratum": list(RISK.values())}))
    rows = con.execute(load_sql("scoring/scores_hierarchical")).arrow().read_all().to_pylist()
    s_hier = [r["s_hier"] for r in rows]
    assert s_hier[0] == 1.0  # same diagnosis
    assert s_hier[1] == pytest.approx(2 / 3, abs=1e-15)  # SCC vs MEL: both high risk
    assert s_hier[2] == pytest.approx(1 / 3, abs=1e-15)  # NV vs MEL: only the root in common
    assert s_hier[3] is None and s_hier[4] is None  # nothing proposed / reference unknown
    assert [r["u_local_head"] for r in rows] == [-1.0, -2.0, -3.0, -4.0, -5.0]
    assert (rows[1]["proposed_diagnosis"], rows[1]["reference_diagnosis"]) == ("SCC", "MEL")
