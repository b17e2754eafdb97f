"""The names an export carries, checked one way wherever they appear: a site's (`site export --site`, an
export's manifest, a registered key's file name `<site>.pub`) and an analysis's (`--arm NAME=PATH`, or the
stem of `--input PATH`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from autheval.errors import RecordError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_RULE = "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def check_name(value: str, flag: str, what: str = "site name") -> str:
    """A name: NAME_RULE (no `:`, the namespace separator, no space, so no contrast's ` minus `, no
    control or non-ASCII character, so no two Unicode spellings of one name), not a reserved name."""
    from autheval.vocabulary import name_problem

    problem = name_problem(value)
    if problem:
        raise RecordError(flag, None, f"the {what} {problem}", f"got {value!r}")
    if not NAME.match(value):
        raise RecordError(flag, None, f"the {what} must be {NAME_RULE}", f"got {value!r}")
    return value


def check_site_name(site: str, flag: str = "--site") -> str:
    """A site name (check_name)."""
    return check_name(site, flag, "site name")


def check_analysis_names(named: Sequence[tuple[str, str]]) -> list[str]:
    """The analysis names of a site's records ((flag, name) each: `--arm` or `--input`), each a name
    (check_name) and no two equal after case folding (a hub, a file system or a reader could merge them)."""
    seen: dict[str, str] = {}
    for flag, name in named:
        check_name(name, flag, "analysis name")
        key = name.casefold()
        if key in seen:
            raise RecordError(
                flag,
                None,
                "an analysis name is given twice (names equal but for case are one)",
                f"{seen[key]!r}, {name!r}",
            )
        seen[key] = name
    return [name for _, name in named]
