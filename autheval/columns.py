"""The lake's columns and their Arrow types, defined once: a table's schema is its column names in order.

A name has one type in every table that has it; `value` differs (a number in `model_runs`, text in the
ingest report), so each table gives its type itself. warehouse/ keeps its own schemas (it does not
import autheval).
"""

from __future__ import annotations

import pyarrow as pa


def _typed(arrow_type: pa.DataType, names: str) -> dict[str, pa.DataType]:
    return dict.fromkeys(names.split(), arrow_type)


COLUMN_TYPES: dict[str, pa.DataType] = {
    **_typed(
        pa.string(),
        """action adjustment age_bin analysis anatomic_site answer arm_a arm_b axis backend base_node best_group
        category ci_method cluster_id column_name component_id config contrast config_sha256 data_sha256 device
        diagnosis dimension dtype duplicate_group engine exact_group_id expected_sha256 family fitzpatrick_skin_type
        format group grouping groups hash_kind image image_hash image_id image_path input_sha256 interval_method
        item_id kept_image_id lake_group lesion_id mechanism method metric model model_revision model_version
        multiplicity path patient_id period perturbation profile_signature prompt_id protocol_sha256
        protocol_version question reason record_level removed_image_id revision reward_form risk_stratum role rule
        rule_sha256 rule_version scheme scope sex sex_norm sha256 site site_id site_norm site_profile skin_tone
        software_version source source_image split split_key status step_kind task trainer unit use warning
        worst_group""",
    ),
    **_typed(
        pa.int64(),
        """bytes cluster_size component_size count family_size horizon_clusters hypothesis look min_clusters mtime_ns n
        n_clusters n_correct n_groups n_items reps reps_undefined row_id row_index row_number seed size
        smallest_group_clusters smallest_group_items step support_clusters""",
    ),
    **_typed(pa.int32(), "answer_index autheval_distance choice ideal_action_level threshold"),
    **_typed(
        pa.float64(),
        """accuracy age alpha alpha_adjusted baseline_share bayes_factor ci_lower ci_upper completion_tokens cs_lower
        cs_upper estimate fairness_ratio frac_zero_std_groups gate heldout_r_acc heldout_r_fmt heldout_reward
        heldout_s_hier heldout_s_morph kl loss lower lr max_accuracy min_accuracy p_running p_value r_acc r_fmt
        reward reward_std rho2 s_assistant s_hier s_morph share sigma skin_ita upper""",
    ),
    **_typed(
        pa.bool_(),
        "available checksum_ok chosen component_crosses_split correct exact_hash_duplicate excludes_zero "
        "excludes_zero_adjusted shifted tested",
    ),
    **_typed(pa.list_(pa.string()), "options"),
    **_typed(pa.uint64(), "phash"),
    **_typed(pa.list_(pa.float64()), "loglik prob"),
    **_typed(pa.list_(pa.float32()), "feature"),
    **_typed(pa.timestamp("us", tz="UTC"), "scored_at"),
}


def typed(arrow_type: pa.DataType, names: str | tuple[str, ...]) -> list[tuple[str, pa.DataType]]:
    """(name, type) pairs of columns that share a type their table gives itself (`schema` takes them)."""
    return [(name, arrow_type) for name in (names.split() if isinstance(names, str) else names)]


def schema(*columns: str | tuple[str, pa.DataType]) -> pa.Schema:
    """The schema of these columns, in order: a string names one or more columns (separated by white
    space), each of the type COLUMN_TYPES gives it; a (name, type) pair is a column whose type the table
    gives itself."""
    fields: list[tuple[str, pa.DataType]] = []
    for part in columns:
        if isinstance(part, tuple):
            fields.append(part)
        else:
            fields.extend((name, COLUMN_TYPES[name]) for name in part.split())
    return pa.schema(fields)
