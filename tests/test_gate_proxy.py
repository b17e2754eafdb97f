"""The gate proxy (AuthEval spec 2): features, class-balanced ridge, selection order, binning, and a
test split that never reaches the fit or the selection."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from models.gate_proxy import (
    MISSING,
    FeatureSchema,
    binned_level,
    fit_gate_proxy,
    fit_ridge,
    metrics,
    normalise_category,
    probabilities,
)


def test_categories_are_normalised_as_the_spec_says():
    assert normalise_category([None, "", " NaN ", "None", " Male", "anterior torso"]) == [
        MISSING,
        MISSING,
        MISSING,
        MISSING,
        "male",
        "anterior torso",
    ]


def test_design_matrix_columns_and_values():
    schema = FeatureSchema.from_train(
        np.array([20.0, 40.0, np.nan]), ["male", "female", MISSING], ["head", MISSING, "back"]
    )
    assert (schema.age_mean, schema.age_scale) == (30.0, 10.0)
    assert schema.columns == [
        "intercept",
        "age_z",
        "age_missing",
        "sex_missing",
        "anatomic_site_missing",
        "sex=female",
        "sex=male",
        "sex=__other__",
        "anatomic_site=back",
        "anatomic_site=head",
        "anatomic_site=__other__",
    ]
    x = schema.design(np.array([50.0, np.nan]), ["unknown", MISSING], ["head", "palms"])
    assert x[0].tolist() == [1, 2.0, 0, 0, 0, 0, 0, 1, 0, 1, 0]
    assert x[1].tolist() == [1, 0.0, 1, 1, 0, 0, 0, 0, 0, 0, 1]


def test_constant_or_absent_train_ages_scale_one():
    assert FeatureSchema.from_train(np.array([40.0, 40.0]), [], []).age_scale == 1.0
    empty = FeatureSchema.from_train(np.array([np.nan]), [], [])
    assert (empty.age_mean, empty.age_scale) == (0.0, 1.0)


def test_ridge_is_class_balanced_with_an_unpenalised_intercept():
    """Against scikit-learn's ridge with sample weights N / (4 n_k) and a fitted (unpenalised) intercept."""
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(3)
    features = rng.normal(size=(200, 3))
    levels = np.minimum((features[:, 0] > 0) + (features[:, 1] > 1) * 2 + rng.integers(0, 2, 200), 3)
    x = np.column_stack([np.ones(200), features])
    ours = fit_ridge(x, levels, alpha=2.5)
    counts = np.bincount(levels, minlength=4)
    weights = 200 / (4 * counts[levels])
    reference = Ridge(alpha=2.5).fit(features, np.eye(4)[levels], sample_weight=weights)
    assert np.allclose(ours[0], reference.intercept_, atol=1e-9)
    assert np.allclose(ours[1:], reference.coef_.T, atol=1e-9)


def test_binning_is_strict_and_balanced_accuracy_counts_absent_classes():
    assert binned_level(np.array([0.25, 0.2500001, 0.5, 0.75, 0.76])).tolist() == [0, 1, 1, 2, 3]
    probs = np.tile([1.0, 0.0, 0.0, 0.0], (3, 1))  # s_gate 0.10 -> level 0 for every row
    m = metrics(probs, np.array([0, 0, 0]))
    assert m["balanced_accuracy"] == 0.25 and m["ordinal_mae"] == 0.0 and m["brier"] == 0.0


def test_softmax_temperature_sharpens():
    x, w = np.array([[1.0]]), np.array([[1.0, 2.0, 0.0, 0.0]])
    assert probabilities(x, w, 0.25)[0, 1] > probabilities(x, w, 4.0)[0, 1]
    assert np.isclose(probabilities(x, w, 1.0).sum(), 1.0)


def _cohort(n: int = 400, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    age = rng.uniform(15, 90, n)
    age[rng.random(n) < 0.1] = np.nan
    site = rng.choice(["head/neck", "back", "lower extremity", "palms/soles", None], n)
    sex = rng.choice(["male", "female", None], n)
    risk = np.clip(
        np.nan_to_num((age - 20) / 20, nan=1).astype(int) + (site == "head/neck") + rng.integers(0, 2, n) - 1, 0, 3
    )
    split = rng.choice(["train", "val", "test"], n, p=[0.6, 0.2, 0.2])
    return pa.table(
        {
            "image_id": [f"ISIC_{i:07d}" for i in range(n)],
            "split": split.tolist(),
            "age": [None if np.isnan(a) else float(a) for a in age],
            "sex": sex.tolist(),
            "anatomic_site": site.tolist(),
            "ideal_action_level": risk.tolist(),
        }
    )


def test_selection_is_the_lexicographic_minimum_on_validation():
    proxy = fit_gate_proxy(_cohort())
    rows = proxy.selection.to_pylist()
    assert len(rows) == 48
    best = min(
        rows, key=lambda r: (r["ordinal_mae"], r["brier"], -r["balanced_accuracy"], r["alpha"], r["temperature"])
    )
    assert [r for r in rows if r["selected"]] == [best]
    assert (proxy.alpha, proxy.temperature) == (best["alpha"], best["temperature"])
    s = proxy.scores.column("s_gate").to_numpy()
    assert proxy.scores.num_rows == 400 and np.all((s > 0.1 - 1e-12) & (s < 0.9 + 1e-12))
    assert proxy.metadata()["test_used_for_fitting_or_selection"] is False


def test_test_labels_never_reach_the_fit_or_the_selection():
    cohort = _cohort()
    base = fit_gate_proxy(cohort)
    split = cohort.column("split").to_pylist()
    scrambled = [
        None if s == "test" else level for s, level in zip(split, cohort.column("ideal_action_level").to_pylist())
    ]
    changed = fit_gate_proxy(cohort.set_column(5, "ideal_action_level", pa.array(scrambled, pa.int64())))
    assert changed.scores.column("s_gate").equals(base.scores.column("s_gate"))
    assert (changed.alpha, changed.temperature) == (base.alpha, base.temperature)
    assert changed.data_sha256 != base.data_sha256  # the data hash names what was read


def test_missing_splits_or_targets_are_refused():
    cohort = _cohort()
    with pytest.raises(ValueError, match="train and val"):
        fit_gate_proxy(cohort.set_column(1, "split", pa.array(["train"] * cohort.num_rows)))
    levels = cohort.column("ideal_action_level").to_pylist()
    first_train = cohort.column("split").to_pylist().index("train")
    levels[first_train] = None
    with pytest.raises(ValueError, match="ideal_action_level"):
        fit_gate_proxy(cohort.set_column(5, "ideal_action_level", pa.array(levels, pa.int64())))


def test_the_selection_names_its_data_and_config_and_is_the_gate_proxys_run():
    """Issue 16 item 3: gate_proxy_selection names the data hash and config; model_runs reads its 48
    candidates from it (step = candidate, chosen = selected), nothing recomputed."""
    import json

    from models.gate_proxy import CONFIG, training_run
    from models.training_runs import SCHEMA

    proxy = fit_gate_proxy(_cohort())
    assert set(proxy.selection.column("data_sha256").to_pylist()) == {proxy.data_sha256}
    assert json.loads(proxy.selection.column("config")[0].as_py()) == CONFIG
    table = training_run(proxy.selection).table()
    assert table.schema == SCHEMA and set(table.column("trainer").to_pylist()) == {"gate_proxy"}
    rows = table.to_pylist()
    assert {r["step"] for r in rows} == set(range(1, 49)) and {r["step_kind"] for r in rows} == {"candidate"}
    chosen = {(r["metric"], r["value"]) for r in rows if r["chosen"]}
    assert {("alpha", proxy.alpha), ("temperature", proxy.temperature)} <= chosen
    assert len({r["step"] for r in rows if r["chosen"]}) == 1
    selected = [r for r in proxy.selection.to_pylist() if r["selected"]][0]
    assert chosen == {(k, v) for k, v in selected.items() if k not in ("selected", "data_sha256", "config")}
    assert {r["data_sha256"] for r in rows} == {proxy.data_sha256} and {r["seed"] for r in rows} == {None}
    given = pa.table({"gate_proxy": ["given by the source"], "path": ["/scores.csv"]})
    assert training_run(given) is None  # scores given by a source: nothing was fitted
