"""Reading what a site signed, one way for every part of an export: a JSON object, and each field checked
for presence, type, shape and range before it is used, a refusal being one line naming the file and the
field path (autheval.sites.pool, autheval.sites.monitor)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from autheval.errors import RecordError
from autheval.parse import load_json


def json_object(data: bytes, source: str) -> dict:
    """The JSON object of `data` (autheval.parse.load_json's limits), or one line naming `source`."""
    value = load_json(data, source)
    if not isinstance(value, dict):
        raise RecordError(source, None, "is not a JSON object")
    return value


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value) -> bool:
    """A whole number from 0 (an integer, or a float below 2^53 holding one exactly)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return value >= 0
    return math.isfinite(value) and value.is_integer() and 0 <= value <= 2**53


class Fields:
    """One line naming the export file and the field path when a field is missing or of another type."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, rule: str, value=None) -> RecordError:
        example = None if value is None else f"got {short(value)}"
        return RecordError(str(self.path), None, f"{field} {rule}", example)

    def get(self, obj: dict, key: str, where: str):
        field = f"{where}.{key}" if where else key
        if key not in obj:
            raise RecordError(str(self.path), None, f"{field} is missing")
        return obj[key], field

    def only(self, obj: dict, keys: tuple[str, ...], where: str = "") -> None:
        """Refuse a key `obj` should not hold: a signed file says nothing the hub does not read."""
        unknown = sorted(k for k in obj if k not in keys)
        if unknown:
            field = f"{where}.{unknown[0]}" if where else unknown[0]
            raise self.fail(field, f"is not a field of this file (its fields: {', '.join(keys)})")

    def text(self, obj: dict, key: str, where: str = "") -> str:
        value, field = self.get(obj, key, where)
        if not isinstance(value, str) or not value or len(value) > 256:
            raise self.fail(field, "must be a non-empty string (at most 256 characters)", value)
        return value

    def flag(self, obj: dict, key: str, where: str = "") -> bool:
        value, field = self.get(obj, key, where)
        if not isinstance(value, bool):
            raise self.fail(field, "must be true or false", value)
        return value

    def count(self, obj: dict, key: str, where: str = "", low: int = 0, high: int = 2**62) -> int:
        value, field = self.get(obj, key, where)
        if not is_count(value) or not low <= value <= high:
            raise self.fail(field, f"must be a whole number from {low:,} to {high:,}", value)
        return int(value)

    def number(self, obj: dict, key: str, where: str = "") -> float:
        value, field = self.get(obj, key, where)
        if not is_number(value):
            raise self.fail(field, "must be a finite number", value)
        return float(value)

    def obj(self, obj: dict, key: str, where: str = "") -> dict:
        value, field = self.get(obj, key, where)
        if not isinstance(value, dict):
            raise self.fail(field, "must be an object", value)
        return value

    def items(self, obj: dict, key: str, where: str = "", high: int = 1_000_000) -> list:
        value, field = self.get(obj, key, where)
        if not isinstance(value, list) or len(value) > high:
            raise self.fail(field, f"must be a list of at most {high:,} entries")
        return value

    def numbers(self, value, field: str, length: int) -> list[float | None]:
        """A list of `length` finite numbers or nulls (a sum over no cluster is null)."""
        if (
            not isinstance(value, list)
            or len(value) != length
            or any(v is not None and not is_number(v) for v in value)
        ):
            raise self.fail(field, f"must be a list of {length} finite numbers or nulls", value)
        return [None if v is None else float(v) for v in value]

    def array(self, obj: dict, key: str, shape: tuple[int, ...], where: str = "") -> np.ndarray:
        value, field = self.get(obj, key, where)
        dims = "x".join(str(n) for n in shape)
        rule = f"must be {'an' if dims[0] == '8' or dims[:2] in ('11', '18') else 'a'} {dims} array of finite numbers"
        if not shaped(value, shape):
            raise self.fail(field, rule)
        return np.asarray(value, dtype=np.float64)


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shaped(value, shape: tuple[int, ...]) -> bool:
    if not shape:
        return is_number(value)
    return isinstance(value, list) and len(value) == shape[0] and all(shaped(v, shape[1:]) for v in value)
