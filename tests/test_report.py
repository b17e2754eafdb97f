"""The report's plots: what they show and in which order."""

from __future__ import annotations

import pyarrow as pa


def test_trend_plot_puts_every_pool_to_date_first():
    from autheval.report import trend_plot_rows

    periods = ["2026-01 (role_separated)", "all (role_separated)", "2026-01 (full_counterfactual)",
               "all (full_counterfactual)", "2025-12 (full_counterfactual)"]
    trend = pa.table({"period": periods, "metric": ["Delta_authority"] * 5, "unit": ["image_weighted"] * 5,
                      "estimate": [0.1] * 5})
    ordered = [r["period"] for r in trend_plot_rows(trend)]
    assert ordered == ["all (full_counterfactual)", "all (role_separated)", "2025-12 (full_counterfactual)",
                       "2026-01 (full_counterfactual)", "2026-01 (role_separated)"]
