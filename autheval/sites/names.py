"""A site's name, checked one way wherever it appears: `site export --site`, an export's manifest, and
a registered key's file name (`<site>.pub`)."""

from __future__ import annotations

import re

from autheval.errors import RecordError

SITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_site_name(site: str, flag: str = "--site") -> str:
    """A site name: 1 to 64 letters, digits, `_`, `.` or `-` (no `:`, the namespace separator, no
    space or control character), not a reserved name."""
    from autheval.vocabulary import name_problem

    problem = name_problem(site)
    if problem:
        raise RecordError(flag, None, f"the site name {problem}", f"got {site!r}")
    if not SITE_NAME.match(site):
        raise RecordError(
            flag,
            None,
            "a site name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            f"got {site!r}",
        )
    return site
