"""proposals: each mechanism's proposed action per image (the head of its ranked slate)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import AssetCheckSpec, asset, multi_asset_check

from assets.common import PROPOSALS, check_result, check_row, reference_table, write_table
from assets.model_proposals import CCT_CC, CCT_SINGLE, MODEL_PROPOSAL_TABLES, READOUT, model_proposals
from assets.resources import LakeResource, ModelsResource, SourceResource
from autheval.io import file_sha256
from autheval.proposals.proposals_file import check_coverage, combine_proposals, evaluated_image_ids, read_proposals
from autheval.raw.ingest import excluded_images
from autheval.reference_data import REFERENCE_ANALYSES, manifest, reference_path


@asset(
    group_name=PROPOSALS,
    kinds={"parquet"},
    deps=["images", "clusters", *MODEL_PROPOSAL_TABLES, "vlm_scores", "model_runs"],
    description=(
        "What each proposal mechanism proposed for each image. Raw cohorts: mechanism, image_id, slate "
        "(ranked actions), a_head, p_very_low, p_low, p_moderate, p_high, diagnosis, source: a proposals "
        "file's mechanisms (validated), then, when models are enabled, the lake's model mechanisms (VLM "
        "readout, CLIP probe, CCT single, CCT cc, and the LoRA fine-tune when configured). Reference study: "
        "mechanism, policy_id, image_id, slate_size, a_head of the MedGemma "
        "readout, LLaVA-Med head and CLIP probe (their slates are not shipped)."
    ),
)
def proposals(lake: LakeResource, source: SourceResource, models: ModelsResource):
    store = lake.lake()
    if source.is_reference:
        table = reference_table(store, "proposals/proposals")
    else:
        table = raw_source_proposals(store, source, models.enabled)
    table = with_producers(table, producers(store, source))
    mechanisms = list(dict.fromkeys(table.column("mechanism").to_pylist()))
    return write_table(store, "proposals", table, mechanisms=", ".join(mechanisms))


def producers(store, source: SourceResource) -> dict[str, tuple[str, str]]:
    """mechanism -> (producer, producer_sha256): the published trace file for the reference study, the
    proposals file for a file's mechanism, the model directory and its content hash for a model's
    (model_runs names the trained ones, vlm_scores the scorer behind the readout and CCT)."""
    if source.is_reference:
        files = manifest()
        return {
            mechanism: (f"reference:{files[trace]['source']}", files[trace]["parquet_sha256"])
            for _, study, mechanism, _, trace in REFERENCE_ANALYSES
            if study == "mechanisms"
        }
    found: dict[str, tuple[str, str]] = {}
    path = source.proposals_file()
    if path:
        digest = file_sha256(path)
        for mechanism in dict.fromkeys(read_proposals(path).column("mechanism").to_pylist()):
            found[mechanism] = (f"file:{lake_relative(store, path)}", digest)
    if store.has_table("vlm_scores"):
        scorer = store.read("vlm_scores").select(["model", "revision"]).to_pylist()[:1]
        if scorer:
            for mechanism in (READOUT, CCT_SINGLE, CCT_CC):
                found.setdefault(
                    mechanism, (f"model:{lake_relative(store, scorer[0]['model'])}", scorer[0]["revision"])
                )
    if store.has_table("model_runs"):
        for row in store.read("model_runs").select(["mechanism", "model", "model_revision"]).to_pylist():
            if row["mechanism"]:
                found[row["mechanism"]] = (f"model:{lake_relative(store, row['model'])}", row["model_revision"])
    return found


def lake_relative(store, path) -> str:
    """A file's or model folder's absolute path, the lake's own folder written as `<lake>` (as receipts
    write it): what the lake holds (a generated cohort's proposals, a tiny model built into it) is named
    the same wherever the lake lies, so two lakes of the same inputs hold the same bytes. A model named
    by its hub id (not a path here) is kept as it is."""
    text = str(path)
    if not store.location.is_local or not (Path(text).is_absolute() or Path(text).exists()):
        return text
    resolved = Path(text).resolve()
    root = Path(store.location.root)
    return "<lake>/" + resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else str(resolved)


def with_producers(table: pa.Table, found: dict[str, tuple[str, str]]) -> pa.Table:
    """`table` with `producer` and `producer_sha256`: what made each row's proposal."""
    mechanisms = table.column("mechanism").to_pylist()
    for i, name in enumerate(("producer", "producer_sha256")):
        table = table.append_column(name, pa.array([found.get(m, (None, None))[i] for m in mechanisms], pa.string()))
    return table


def raw_source_proposals(store, source: SourceResource, with_models: bool = False):
    """A raw cohort's proposals in the contract (mechanism, image_id, slate, a_head, p_*, diagnosis,
    source): the source's proposals file, validated against the lake's images, each of its mechanisms
    covering every evaluated image (else one line naming the file and the mechanism, and nothing is
    written), then (`with_models`) the model mechanisms' tables in declaration order."""
    path = source.proposals_file()
    if path is None and not with_models:
        raise ValueError(
            "no proposals for this cohort: name a proposals file (CSV or Parquet with mechanism, "
            "image_id and the four probabilities, a slate or an a_head) as the source's `proposals`, "
            "or enable the model mechanisms"
        )
    parts = []
    if path:
        from_file = read_proposals(path, store.read("images").column("image_id"), ingest_exclusions(store))
        evaluated = evaluated_image_ids(store.read("clusters"), source.evaluate_split)
        check_coverage(from_file, evaluated, path, source.evaluate_split)
        parts.append(from_file)
    return combine_proposals(parts + (model_proposals(store) if with_models else []))


def ingest_exclusions(store) -> dict[str, str] | None:
    """image id -> why ingest left it out of `images` (the lake's ingest_report), so that a file naming
    such an image says so; None where the lake has no report."""
    try:
        report = store.read("ingest_report")
    except (FileNotFoundError, KeyError):
        return None
    return excluded_images(report)


@multi_asset_check(
    specs=[
        AssetCheckSpec(
            "proposals_match_frozen_heads",
            asset="proposals",
            description=(
                "the control heads equal the study's frozen heads; not run, so shown as skipped, for a raw cohort"
            ),
        )
    ],
    can_subset=True,
)
def proposals_match_frozen_heads(context, lake: LakeResource, source: SourceResource):
    if not source.is_reference:
        context.log.info("proposals_match_frozen_heads skipped: the frozen heads belong to the reference study")
        return
    frozen = pq.read_table(reference_path("frozen_proposal_heads"))
    row = check_row(lake.lake(), "proposals/check_frozen_heads", ["proposals"], extra={"frozen_heads": frozen})
    yield check_result(row, "proposals_match_frozen_heads")
