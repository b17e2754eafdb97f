"""`autheval rules show` (print the study's default rule file) and `autheval rules check FILE`
(validate one: one line naming the key, exit 2, on the first broken rule).

autheval/cli/main.py calls register(subparsers); the CLI's RecordError handler turns RuleError into exit 2.
"""

from __future__ import annotations

import argparse
import sys

from autheval.cli.flags import add_show_check


def cmd_rules_show(args) -> int:
    from autheval.review.rules import default_rules_text

    sys.stdout.write(default_rules_text())
    return 0


def cmd_rules_check(args) -> int:
    from autheval.review.rules import load_rules

    rule_file = load_rules(args.file)
    rules = rule_file.rules
    print(
        f"{args.file}: ok: version {rules.version}, sha256 {rule_file.sha256}, "
        f"{len(rules.profiles)} profiles ({', '.join(rules.profiles)}), "
        f"missing age and site -> {rules.profile_assignment.missing_age_and_site}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `rules show` and `rules check FILE` to the `autheval` parser."""
    add_show_check(
        subparsers,
        "rules",
        "the declared local rules of the simulated review (YAML)",
        "rule file",
        "print the default rule file (the published study's values)",
        cmd_rules_show,
        cmd_rules_check,
    )
