"""Declared local rules of the simulated review: one versioned YAML file, parsed and validated by a
pydantic schema (AuthEval reference spec sections 0.1, 2, 3 and 4).

The study's values ship as `autheval/data/rules/default.yaml`; a service replaces the file with its
own. A broken file is one line naming the key and the rule (`rules.yaml: profiles.clinic.capacity:
must be one of a0..a3`), raised as RuleError (exit code 2 in the CLI), so nothing runs on rules that
were not what the author meant. Every row computed from the rules names `version` and the file's
SHA-256 (`RuleFile.version`, `RuleFile.sha256`).

What YAML itself lets pass is refused too, before any value is built (RulesLoader): a key given twice
(YAML keeps the last one silently), more than MAX_ALIASES aliases, or aliases that expand to more than
MAX_NODES values (an alias bomb). Numbers are bounded so that no rule's arithmetic can overflow: weights
and severities at most MAX_WEIGHT, floor shifts within the action scale, thresholds within
MAX_THRESHOLD, the context seed a non-negative 64-bit integer.
"""

from __future__ import annotations

import hashlib
import reprlib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.functional_validators import BeforeValidator

from autheval.errors import RecordError
from autheval.parse import MAX_ALIASES, MAX_NODES, SafeYamlLoader, key_path, load_yaml  # noqa: F401 (re-exported)
from autheval.vocabulary import ACTIONS, RISK_LEVELS

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

_M = TypeVar("_M", bound=BaseModel)
PROFILE_RULES = ("missing_tokens", "nan_age_bin", "image_id")  # spec 1.5 and 9.1
DEFAULT_RULES = files("autheval") / "data" / "rules" / "default.yaml"
MAX_WEIGHT = 1e6  # weights and severities: a product of five stays far below overflow
MAX_THRESHOLD = 1e6  # proxy thresholds: |t| bounded, so midpoints between them stay finite
MAX_SHIFT = len(ACTIONS) - 1  # a floor shift beyond the action scale is clipped to it anyway
MAX_SEED = 2**63 - 1


class RuleError(RecordError):
    """A rule file broke its schema: `str(err)` is `FILE: KEY.PATH: rule`, one line (exit code 2)."""

    def __init__(self, source: str, key: str | None, rule: str):
        super().__init__(source, key, rule)
        self.args = (f"{source}: {key}: {rule}" if key else f"{source}: {rule}",)


def _action(value):
    """An action name a0..a3 (levels are written as names so a file reads like a trace)."""
    if value not in ACTIONS:
        raise ValueError(f"must be one of {ACTIONS[0]}..{ACTIONS[-1]} (got {value!r})")
    return value


Action = Annotated[str, BeforeValidator(_action)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]


def _per_risk_level(mapping: object) -> object:
    """A table keyed by every risk stratum, in the ordinal order, and nothing else."""
    if not isinstance(mapping, dict):
        return mapping  # pydantic names the type error
    missing = [r for r in RISK_LEVELS if r not in mapping]
    extra = [k for k in mapping if k not in RISK_LEVELS]
    if extra:
        raise ValueError(f"unknown risk level {extra[0]!r}: the keys are {', '.join(RISK_LEVELS)}")
    if missing:
        raise ValueError(f"missing risk level {missing[0]!r}: the keys are {', '.join(RISK_LEVELS)}")
    return {r: mapping[r] for r in RISK_LEVELS}


class _Strict(BaseModel):
    """Every section: unknown keys are errors, values are never coerced from other types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Profile(_Strict):
    capacity: Action
    floor_policy: Name
    w_under: Weight
    w_over: Weight


class ProxyBins(_Strict):
    thresholds: list[Annotated[float, Field(ge=-MAX_THRESHOLD, le=MAX_THRESHOLD, allow_inf_nan=False)]]

    @field_validator("thresholds")
    @classmethod
    def _increasing(cls, value):
        if len(value) != len(RISK_LEVELS) - 1:
            raise ValueError(f"must list {len(RISK_LEVELS) - 1} thresholds, one between each pair of risk levels")
        if any(b <= a for a, b in zip(value, value[1:])):
            raise ValueError("must be strictly increasing")
        return value


class ProfileAssignment(_Strict):
    missing_age_and_site: Literal["missing_tokens", "nan_age_bin", "image_id"]


class Floor(_Strict):
    base: Annotated[
        dict[str, Annotated[int, Field(ge=0, le=len(ACTIONS) - 1, strict=True)]], BeforeValidator(_per_risk_level)
    ]
    shift: dict[Name, Annotated[int, Field(strict=True, ge=-MAX_SHIFT, le=MAX_SHIFT)]] = Field(min_length=1)


class SensLevel(_Strict):
    name: Name
    w_under: Weight
    w_over: Weight


class OverLevel(_Strict):
    name: Name
    w_over: Weight


def _unique_names(levels):
    names = [level.name for level in levels]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"level {name!r} is listed twice")
    return levels


class SensFactor(_Strict):
    namespace: Name
    levels: list[SensLevel] = Field(min_length=1)
    _unique = field_validator("levels")(_unique_names)


class OverFactor(_Strict):
    namespace: Name
    levels: list[OverLevel] = Field(min_length=1)
    _unique = field_validator("levels")(_unique_names)


class PrivateFactors(_Strict):
    sens: SensFactor
    burden: OverFactor
    aversion: OverFactor


class RefusalOverride(_Strict):
    level: Name
    removes: Action


class BurdenOverride(_Strict):
    level: Name
    removes: Action
    if_band_has: Annotated[dict[str, Action], BeforeValidator(_per_risk_level)]


class Overrides(_Strict):
    patient_refusal: RefusalOverride
    patient_burden: BurdenOverride


class GlobalUtility(_Strict):
    w_under: Weight
    w_over: Weight


class Rules(_Strict):
    """The whole rule file. Field order is the file's order (see default.yaml for what each means)."""

    version: Name
    actions: list[str]
    severity: Annotated[dict[str, Weight], BeforeValidator(_per_risk_level)]
    proxy_bins: ProxyBins
    profiles: dict[Name, Profile] = Field(min_length=1)
    profile_assignment: ProfileAssignment
    floor: Floor
    context_seed: Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]
    private_factors: PrivateFactors
    overrides: Overrides
    empty_band_default: Annotated[dict[str, Action], BeforeValidator(_per_risk_level)]
    global_utility: GlobalUtility

    @field_validator("actions")
    @classmethod
    def _ordinal(cls, value):
        if list(value) != list(ACTIONS):
            raise ValueError(
                f"must be the ordinal action list {', '.join(ACTIONS)} in this order (got {', '.join(map(str, value))})"
            )
        return value

    @model_validator(mode="after")
    def _cross_references(self):
        """Names used in one section must be declared in another; reported at the key that uses them."""
        policies = list(self.floor.shift)
        for name, profile in self.profiles.items():
            if profile.floor_policy not in policies:
                raise _KeyedError(
                    ("profiles", name, "floor_policy"),
                    f"must be one of {', '.join(policies)} (the keys of floor.shift)",
                )
        for override, factor in (("patient_refusal", "aversion"), ("patient_burden", "burden")):
            levels = [level.name for level in getattr(self.private_factors, factor).levels]
            if getattr(self.overrides, override).level not in levels:
                raise _KeyedError(
                    ("overrides", override, "level"),
                    f"must be one of {', '.join(levels)} (the levels of private_factors.{factor})",
                )
        return self


class _KeyedError(ValueError):
    """A cross-section error that knows its own key path (pydantic would report it at the root)."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc, self.message = loc, message


@dataclass(frozen=True)
class RuleFile:
    """Validated rules plus what every derived row must name: the version and the file's SHA-256."""

    rules: Rules
    source: str
    sha256: str
    text: str

    @property
    def version(self) -> str:
        return self.rules.version


def default_rules_text() -> str:
    """The study's rule file, as shipped in the package."""
    return DEFAULT_RULES.read_text(encoding="utf-8")


_key_path = key_path


_SHORT = reprlib.Repr()  # (keyword arguments need Python 3.12)
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 6
_SHORT.maxlevel = 2


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def validate_keyed(model: type[_M], data: dict, source: str, error: type[RecordError], said) -> _M:
    """`data` as `model`, or pydantic's first error raised as `error(source, key path, rule)`: a _KeyedError
    at its own key path (below the key it was raised at), any other at its key (union-branch tags left out)
    worded by `said(error details)`. The rule file and the monitoring protocol are validated this way."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        keyed = (first.get("ctx") or {}).get("error")
        loc = tuple(x for x in first["loc"] if not (isinstance(x, str) and x.startswith(("function-", "literal["))))
        if isinstance(keyed, _KeyedError):
            raise error(source, _key_path(loc + keyed.loc), keyed.message) from None
        raise error(source, _key_path(loc) or None, said(first)) from None


def _rule_text(error: ErrorDetails) -> str:
    """pydantic's message, said as a rule (`must be >= 0 (got -1.2)`); the value's repr is cut short
    (an aliased list can be huge)."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, _Shown(error.get("input"))
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "greater_than_equal":
        return f"must be >= {_number(ctx.get('ge'))} (got {value!r})"
    if kind == "less_than_equal":
        return f"must be <= {_number(ctx.get('le'))} (got {value!r})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '').replace(' or ', ', ')} (got {value!r})"
    if kind == "value_error":
        err = ctx.get("error")
        return str(err) if err is not None else error["msg"].removeprefix("Value error, ")
    return f"{error['msg'][:1].lower()}{error['msg'][1:]} (got {value!r})"


class _Shown:
    """A value printed by a short repr (`{value!r}` in the rule texts)."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return _SHORT.repr(self.value)


RulesLoader = SafeYamlLoader  # the shared checked loader (autheval.parse): depth, duplicate keys, aliases


def _load_yaml(text: str, source: str):
    """The YAML document as Python values through the shared loader (autheval.parse.load_yaml); broken
    YAML is one RuleError line."""
    try:
        return load_yaml(text, source, what="a rule file")
    except RuleError:
        raise
    except RecordError as err:
        raise RuleError(err.source, err.column, err.rule) from None


def parse_rules(text: str, source: str = "rules.yaml") -> RuleFile:
    """Validate rule-file text; raise RuleError naming the first broken key."""
    data = _load_yaml(text, source)
    if not isinstance(data, dict):
        raise RuleError(source, None, "must be a YAML mapping of rule sections (see `autheval rules show`)")
    rules = validate_keyed(Rules, data, source, RuleError, _rule_text)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return RuleFile(rules=rules, source=source, sha256=sha, text=text)


def load_rules(path: str | Path | None = None) -> RuleFile:
    """The rule file at `path`, or the study's default rules when `path` is None."""
    if path is None:
        return parse_rules(default_rules_text(), source="default.yaml")
    path = Path(path)
    if not path.is_file():
        raise RuleError(str(path), None, "file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RuleError(str(path), None, "is not UTF-8 text") from err
    return parse_rules(text, source=str(path))
