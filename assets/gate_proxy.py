"""gate_proxy: each image's decision-time public risk context s_gate (AuthEval spec 2), a class-balanced
ridge on public metadata fitted on train and selected on validation (models/gate_proxy.py), or the
scores a source gives per image (`SourceResource.gate_scores`), used as given."""

from __future__ import annotations

import pyarrow as pa
from dagster import MetadataValue, multi_asset

from assets.common import CONTEXT, lake_query, table_spec, write_table
from assets.resources import LakeResource, SourceResource
from autheval.review.gate_scores import read_gate_scores
from models.gate_proxy import fit_gate_proxy


@multi_asset(
    specs=[
        table_spec(
            "gate_proxy",
            CONTEXT,
            ["images", "clusters"],
            "image_id, split, s_gate, gate_proxy, proxy_source: the public risk context of every image, from "
            "age, sex and site only (never the diagnosis); train fits, validation selects (alpha, T).",
            kinds={"parquet", "numpy"},
        ),
        table_spec(
            "gate_proxy_selection",
            CONTEXT,
            ["images", "clusters"],
            "the 48 (alpha, T) candidates with their validation metrics, the data hash and the "
            "config; `selected` marks the one used (model_runs reads them as the gate proxy's run).",
        ),
    ]
)
def gate_proxy(lake: LakeResource, source: SourceResource):
    store = lake.lake()
    source.require_raw("gate_proxy")
    inputs = lake_query(store, "context/gate_proxy_inputs", ["images", "clusters"])
    if source.gate_scores:
        scores = read_gate_scores(source.gate_scores, inputs)
        yield write_table(
            store,
            "gate_proxy",
            scores,
            {"proxy_source": "file"},
            asset_key="gate_proxy",
            proxy_source=MetadataValue.path(source.gate_scores),
        )
        given = pa.table({"gate_proxy": ["given by the source"], "path": [source.gate_scores]})
        yield write_table(
            store,
            "gate_proxy_selection",
            given,
            asset_key="gate_proxy_selection",
            note="scores given by the source; nothing selected",
        )
        return
    proxy = fit_gate_proxy(inputs)
    meta = proxy.metadata()
    yield write_table(
        store, "gate_proxy", proxy.scores, {k: str(v) for k, v in meta.items()}, asset_key="gate_proxy", **meta
    )
    yield write_table(
        store,
        "gate_proxy_selection",
        proxy.selection,
        asset_key="gate_proxy_selection",
        alpha=proxy.alpha,
        temperature=proxy.temperature,
    )
