"""The one error type users see for bad input: a single line naming the file, column and rule."""

from __future__ import annotations


class RecordError(ValueError):
    """Bad input. `str(err)` is one line; the CLI prints it and exits with code 2."""

    exit_code = 2

    def __init__(self, source: str, column: str | None, rule: str, example: str | None = None):
        self.source, self.column, self.rule, self.example = source, column, rule, example
        where = f"{source}: column '{column}'" if column else source
        text = f"{where}: {rule}"
        if example:
            text += f" ({example})"
        super().__init__(text)


def first_violation(source: str, violation: tuple, key_name: str = "id") -> RecordError:
    """The RecordError for the first row of a `*_validate.sql` result: (rule_order, column_name, rule,
    row_index, key, bad_value, n_rows), with the example row, key and value in one line."""
    _, column, rule, row_index, key, bad_value, n_rows = violation
    example = f"row {row_index + 1}"
    if key is not None:
        example += f", {key_name} {key!r}"
    if bad_value is not None:
        example += f", value {bad_value!r}"
    if n_rows > 1:
        example += f"; {n_rows} rows in all"
    return RecordError(source, column, rule, example)
