"""declared_rules: the declared local rules as an input of the graph. Every asset that applies or names
the rules (contexts, selections, scores, estimates, subgroups) depends on it and takes the parsed file
from the one `rules` resource (assets.resources.DeclaredRules), so the lineage shows which
rules made a table, and a run parses the file once. No table: every row derived from the rules names
their version and SHA-256 itself."""

from __future__ import annotations

from dagster import DataVersion, MaterializeResult, ResourceParam, asset

from assets.common import INGEST
from assets.resources import DeclaredRules


@asset(
    group_name=INGEST,
    kinds={"yaml"},
    description=(
        "The declared local rules of the simulated review (profiles, private factors, floors, capacities, "
        "severity multipliers, score weights): their version, the file's SHA-256 (also the data version, so "
        "tables built from other rules show as stale) and where they came from."
    ),
)
def declared_rules(rules: ResourceParam[DeclaredRules]):
    rule_file = rules.rule_file()
    return MaterializeResult(
        data_version=DataVersion(rule_file.sha256),
        metadata={"rule_version": rule_file.version, "rule_sha256": rule_file.sha256, "source": rule_file.source},
    )
