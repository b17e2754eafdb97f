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
