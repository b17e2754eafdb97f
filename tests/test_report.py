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


def test_the_forest_plot_leaves_many_contrasts_to_the_table():
    from autheval.report import MAX_PLOTTED_CONTRAST_ROWS, forest_plot_png

    summary = pa.table({"study": ["s"], "analysis": ["a"],
                        **{f"Delta_authority_{k}{part}": [0.1] for k in ("image", "cluster")
                           for part in ("", "_ci_lower", "_ci_upper")}})

    def contrasts(n):
        return pa.table({"contrast": [f"c{i}" for i in range(n)], "unit": ["image_weighted"] * n,
                         "difference": [0.1] * n, "ci_lower": [0.0] * n, "ci_upper": [0.2] * n})

    few = forest_plot_png(summary, contrasts(MAX_PLOTTED_CONTRAST_ROWS))
    many = forest_plot_png(summary, contrasts(MAX_PLOTTED_CONTRAST_ROWS + 1))
    assert len(many) < len(few)  # the plot of many contrasts holds only the gaps
    assert many == forest_plot_png(summary, None)
