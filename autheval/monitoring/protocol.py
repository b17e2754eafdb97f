"""The declared acceptance protocol of a monitored deployment: one versioned YAML file, validated by a
pydantic schema (the same loader and one-line errors as the rule file, autheval.review.rules).

It says, before any data is looked at, what a deployment must keep and how the monitor decides:
the error rate `alpha` of the anytime-valid confidence sequences, the cluster count `horizon_clusters`
at which their boundary is tightest, the clusters needed before any decision (`min_clusters`), the
correction over sites x model versions x rules (`multiplicity`: holm, bonferroni or none) and the
declared size of its family (`family_size`: the most hypotheses it runs over; one without data counts
with p = 1), the periods that make a site's case-mix baseline (`baseline_periods`, or a declared `case_mix_reference`),
per-site overrides (`sites`), and the `rules`: a metric of the monitored set in one unit with a lower
and/or an upper bound. The packaged default is `autheval/data/protocol.yaml`; a service writes its own.

A broken file is one line naming the key and the rule (`protocol.yaml: rules[1].lower: must be <= upper
(0.6)`), raised as ProtocolError (a RecordError: exit code 2 in the CLI). Every monitor row names the
protocol's `version` and the file's SHA-256.
"""

from __future__ import annotations

import hashlib
import stat
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from autheval.errors import RecordError
from autheval.estimation.estimators import UNITS
from autheval.parse import load_yaml
from autheval.records.schema import FULL, PROPOSAL_ONLY, ROLE_SEPARATED
from autheval.review.rules import RuleError, _KeyedError, _rule_text, validate_keyed
from autheval.vocabulary import ACTIONS, RISK_LEVELS

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

DEFAULT_PROTOCOL = files("autheval") / "data" / "protocol.yaml"
MONITORED_METRICS = ("Delta_authority", "intervention_rate", "delta", "J", "J_auth")
MULTIPLICITY = ("holm", "bonferroni", "none")
CASE_MIX_DIMENSIONS = ("proposed_action", "risk_stratum", "workflow_profile", "record_level")
CASE_MIX_CATEGORIES = {  # the categories a declared reference may give a share to, per dimension
    "proposed_action": ACTIONS,  # the proposer's action level
    "risk_stratum": (*RISK_LEVELS, "unspecified"),
    "workflow_profile": ("changed", "accepted", "no_selection"),
    "record_level": (FULL, ROLE_SEPARATED, PROPOSAL_ONLY),
}
SHARE_TOLERANCE = 1e-6  # declared reference shares must sum to 1 within this
MAX_CLUSTERS = 10**12  # horizon and minimum: far beyond any deployment, small enough for exact doubles

Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
Level = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False, strict=True)]  # a number, never a quoted one
Bound = Annotated[float, Field(allow_inf_nan=False, strict=True)]
Clusters = Annotated[int, Field(strict=True, ge=2, le=MAX_CLUSTERS)]
Share = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, strict=True)]


class ProtocolError(RuleError):
    """A protocol file broke its schema: `str(err)` is `FILE: KEY.PATH: rule`, one line (exit code 2)."""


class _Strict(BaseModel):
    """Every section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Rule(_Strict):
    """One acceptance rule: the metric (in one unit) must stay within [lower, upper]; a missing bound
    is open."""

    metric: Literal[MONITORED_METRICS]  # type: ignore[valid-type]
    unit: Literal[UNITS]  # type: ignore[valid-type]
    lower: Bound | None = None
    upper: Bound | None = None

    @model_validator(mode="after")
    def _bounds(self):
        if self.lower is None and self.upper is None:
            raise _KeyedError(("lower",), "a rule needs a lower or an upper bound (or both)")
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise _KeyedError(("lower",), f"must be <= upper ({self.upper:g}); got {self.lower:g}")
        return self

    @property
    def key(self) -> tuple[str, str]:
        return self.metric, self.unit


def _unique_rules(rules):
    seen: dict[tuple[str, str], int] = {}
    for i, rule in enumerate(rules):
        if rule.key in seen:
            raise _KeyedError(
                (i,),
                f"rule {rule.metric} / {rule.unit} is given twice (rules[{seen[rule.key]}] "
                "and here): give each metric and unit once",
            )
        seen[rule.key] = i
    return rules


class SiteOverride(_Strict):
    """What one site changes: its error rate, its minimum clusters, its rules (replacing the list)."""

    alpha: Level | None = None
    min_clusters: Clusters | None = None
    rules: list[Rule] | None = Field(default=None, min_length=1)
    _unique = field_validator("rules")(lambda cls, v: v if v is None else _unique_rules(v))


class Protocol(_Strict):
    """The whole protocol file. `sha256` and `source` are set by load_protocol/parse_protocol."""

    version: Name
    alpha: Level = 0.05
    horizon_clusters: Clusters
    min_clusters: Clusters = 30
    baseline_periods: Annotated[int, Field(strict=True, ge=1, le=1000)] = 3
    multiplicity: Literal[MULTIPLICITY] = "holm"  # type: ignore[valid-type]
    family_size: Annotated[int, Field(strict=True, ge=1, le=10**6)] | None = None
    case_mix_concentration: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False, strict=True)] = 100.0
    case_mix_reference: dict[
        Literal[CASE_MIX_DIMENSIONS],  # type: ignore[valid-type]
        dict[Annotated[str, Field(min_length=1)], Share],
    ] = {}
    sites: dict[Annotated[str, Field(min_length=1)], SiteOverride] = {}
    rules: list[Rule] = Field(min_length=1)

    _sha256: str = PrivateAttr("")
    _source: str = PrivateAttr("protocol.yaml")
    _text: str = PrivateAttr("")

    _unique = field_validator("rules")(lambda cls, v: _unique_rules(v))

    @field_validator("case_mix_reference")
    @classmethod
    def _shares(cls, value):
        for dimension, shares in value.items():
            allowed = CASE_MIX_CATEGORIES[dimension]
            for category in shares:
                if category not in allowed:
                    raise _KeyedError(
                        (dimension, category),
                        f"{category!r} is not a {dimension} category: use {', '.join(allowed)}",
                    )
            total = sum(shares.values())
            if abs(total - 1.0) > SHARE_TOLERANCE:
                raise _KeyedError((dimension,), f"shares must sum to 1 (got {total:g})")
        return value

    @field_validator("sites")
    @classmethod
    def _site_names(cls, value):
        """A site override's name follows the shared name rule (vocabulary.name_problem: no `all`, no
        surrounding whitespace), and two names equal after case folding are one site named twice."""
        from autheval.vocabulary import name_problem

        folded: dict[str, str] = {}
        for site in value:
            problem = name_problem(site)
            if problem:
                raise _KeyedError((site,), f"site name {site!r}: {problem}")
            if site.casefold() in folded:
                raise _KeyedError((site,), f"{site!r} and {folded[site.casefold()]!r} name one site (case aside)")
            folded[site.casefold()] = site
        return value

    @property
    def sha256(self) -> str:
        return self._sha256

    @property
    def source(self) -> str:
        return self._source

    @property
    def text(self) -> str:
        return self._text

    def settings(self, site: str) -> tuple[float, int, list[Rule]]:
        """(alpha, min_clusters, rules) that hold at `site` (its overrides, else the protocol's)."""
        override = self.sites.get(site)
        if override is None:
            return self.alpha, self.min_clusters, list(self.rules)
        return (
            override.alpha if override.alpha is not None else self.alpha,
            override.min_clusters if override.min_clusters is not None else self.min_clusters,
            list(override.rules) if override.rules is not None else list(self.rules),
        )


def default_protocol_text() -> str:
    """The packaged default protocol, as shipped."""
    return DEFAULT_PROTOCOL.read_text(encoding="utf-8")


def parse_protocol(text: str, source: str = "protocol.yaml") -> Protocol:
    """Validate protocol text; raise ProtocolError naming the first broken key."""
    try:
        data = load_yaml(text, source, what="a protocol file")
    except RecordError as err:
        raise ProtocolError(err.source, err.column, err.rule) from None
    if not isinstance(data, dict):
        raise ProtocolError(source, None, "must be a YAML mapping of protocol keys (see `autheval protocol show`)")
    protocol = validate_keyed(Protocol, data, source, ProtocolError, _said)
    protocol._sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    protocol._source = source
    protocol._text = text
    return protocol


def _said(error: ErrorDetails) -> str:
    """pydantic's message as a rule: the rule file's wording (autheval.review.rules), and the kinds only a
    protocol meets (an empty list, strict bounds)."""
    ctx = error.get("ctx") or {}
    if error["type"] == "too_short":
        return "must not be empty: list at least one rule"
    if error["type"] in ("less_than", "greater_than"):
        sign, bound = ("<", ctx.get("lt")) if error["type"] == "less_than" else (">", ctx.get("gt"))
        return f"must be {sign} {bound:g} (got {error.get('input')!r})"
    return _rule_text(error)


def load_protocol(path: Path | str | None = None) -> Protocol:
    """The protocol in `path` (None: the packaged default), validated. An unreadable file is one line."""
    if path is None:
        return parse_protocol(default_protocol_text(), str(DEFAULT_PROTOCOL))
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None  # the read below names why
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # a FIFO would block the read
        raise ProtocolError(str(path), None, "is not a regular file (a FIFO or device); a protocol is a plain file")
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ProtocolError(str(path), None, "no such file") from None
    except IsADirectoryError:
        raise ProtocolError(str(path), None, "is a folder, not a protocol file") from None
    except UnicodeDecodeError:
        raise ProtocolError(str(path), None, "is not UTF-8 text") from None
    except OSError as err:
        raise ProtocolError(str(path), None, f"cannot be read: {err.strerror or err}") from None
    return parse_protocol(text, str(path))
