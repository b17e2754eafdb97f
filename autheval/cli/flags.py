"""What the commands' flags share: the seed range, path flags that may not be empty, and the rule that
a command's outputs never replace its inputs. Imports nothing heavy, so that building the parser (and
`--help`) imports neither numpy nor DuckDB."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

from autheval.cli.common import DEFAULT_LAKE
from autheval.errors import RecordError
from autheval.vocabulary import SEED_MAX

# One seed range for every scheme and command: numpy's streams take any non-negative integer, the
# evaluator adds a per-metric offset (at most 7) and the poisson scheme hashes the seed in signed
# 64-bit SQL integers.
# What a table-writing command's --output may end in, and the format each ending means
OUTPUT_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def path_flag(text: str) -> Path:
    """argparse type of every path flag: an empty one is refused (Path('') is the current folder, so
    `--lake ''` would write the lake's files where the command was started)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (an empty path would mean the current folder)")
    return Path(text)


def output_format(path: Path) -> str:
    """The format ("csv" or "parquet") of a table command's --output by its ending, refused in one line
    naming the flag when the ending is unknown or the path is a folder: one check for every command that
    writes a table (aggregate, mavic score and weights)."""
    fmt = OUTPUT_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise RecordError("--output", None, f"{path}: unknown file type; expected .csv, .parquet or .pq")
    if path.is_dir():
        raise RecordError("--output", None, f"{path} is a folder, not a file")
    return fmt


def add_lake_flag(parser: argparse.ArgumentParser, kind=path_flag) -> None:
    """`--lake DIR` as every command that reads a built lake offers it (default warehouse/lake): one
    wording and default for all of them; `kind` is the argparse type."""
    parser.add_argument("--lake", type=kind, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")


def check_seed(seed: int | None, flag: str = "--seed") -> None:
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise RecordError(flag, None, f"must be an integer from 0 to {SEED_MAX} (2^62 - 1), got {seed}")


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: the same (device, inode) when both exist (through symbolic and
    hard links), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def input_folder(path: str | Path) -> Path | None:
    """The local folder a dataset input lists (a folder itself, a glob's folder, a file:// URI's), resolved;
    None for a single file or an object store's URI."""
    from urllib.parse import unquote, urlsplit

    text = str(path)
    if "://" in text:
        if not text.lower().startswith("file://"):
            return None
        text = unquote(urlsplit(text).path)
    if any(c in text for c in "*?[") and not Path(text).exists():
        head = text[: min(text.index(c) for c in "*?[" if c in text)]
        text = head.rstrip("/") if head.endswith("/") else os.path.dirname(head)
        text = text or "."
    folder = Path(text)
    return folder.resolve() if folder.is_dir() else None


def check_not_an_input(outputs: Iterable[Path], inputs: Iterable[tuple[str, str | Path | None]], flag: str) -> None:
    """Refuse, in one line naming `flag`, an output file that is an input (or a link to one), or lies in
    an input's dataset folder (a folder, a glob's folder): writing it would replace or change the input.
    Checked before any work."""
    given = [(name, path) for name, path in inputs if path is not None]
    for output in outputs:
        for name, path in given:
            if "://" not in str(path) and same_file(output, path):
                raise RecordError(
                    flag,
                    None,
                    f"{output} is the input {name} {path}; writing it would replace the input: choose another {flag}",
                )
            folder = input_folder(path)
            if folder is not None and Path(output).resolve().is_relative_to(folder):
                raise RecordError(
                    flag,
                    None,
                    f"{output} lies in the folder of the input {name} {path}; writing it would change the "
                    f"input: choose another {flag}",
                )


def check_output_dir_apart(folder: Path, inputs: Iterable[tuple[str, str | Path | None]], flag: str) -> None:
    """Refuse, in one line naming `flag`, an output folder that is an input (a file, a dataset folder or a
    glob's folder) or lies inside one: the results would be written into the input."""
    out = Path(folder).resolve()
    for name, path in inputs:
        if path is None:
            continue
        root = input_folder(path)
        if root is None and "://" not in str(path):
            root = Path(path).resolve()
        if root is not None and out.is_relative_to(root):
            raise RecordError(
                flag,
                None,
                f"{folder} is or lies inside the input {name} {path}; the results would be written into "
                f"the input: choose another {flag}",
            )


def check_inputs_outside(folder: Path, inputs: Iterable[tuple[str, Path | None]], flag: str) -> None:
    """Refuse, in one line naming `flag`, an input that is `folder` or lies inside it, for a command
    that rewrites what is in `folder` (the demo's lake)."""
    root = Path(folder).resolve()
    for name, path in inputs:
        if path is not None and Path(path).resolve().is_relative_to(root):
            raise RecordError(
                flag,
                None,
                f"{folder} holds the input {name} {path}, and what is in it is "
                "rewritten: keep inputs outside the lake folder",
            )


def add_command(
    subparsers: argparse._SubParsersAction, name: str, help: str, description: str | None = None, run=None
) -> argparse.ArgumentParser:
    """Register one subcommand: its help line, its description (argparse reflows the text, so a module's
    triple-quoted constant serves) and, when given, the function it runs."""
    parser = subparsers.add_parser(name, help=help, description=description)
    if run is not None:
        parser.set_defaults(func=run)
    return parser


def add_size_flag(parser: argparse.ArgumentParser, default: tuple[int, int], help: str) -> None:
    """`--size W H`: the pixel size of generated images (synth and the demo's synthetic cohort)."""
    parser.add_argument("--size", type=int, nargs=2, default=default, metavar=("W", "H"), help=help)


def add_show_check(
    subparsers: argparse._SubParsersAction, name: str, help: str, what: str, show_help: str, show, check
):
    """`NAME show` (print the packaged default) and `NAME check FILE` (validate a `what`, YAML: one line
    naming the key, exit 2 on error) for a declared file: the review's rules and the monitoring
    protocol are offered the same way, so one function builds both."""
    p = subparsers.add_parser(name, help=help)
    sub = p.add_subparsers(dest=f"{name}_command", required=True)
    sub.add_parser("show", help=show_help).set_defaults(func=show)
    check_parser = sub.add_parser("check", help=f"validate a {what} (one line naming the key; exit 2 on error)")
    check_parser.add_argument("file", type=Path, help=f"the {what} (YAML)")
    check_parser.set_defaults(func=check)
