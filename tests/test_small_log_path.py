"""The small-log path (issue 30): `compare` reads its arms two at a time, yet warns and refuses in arm
order, as if it read them one by one; a record read into memory gives the numbers of one scanned."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli

HEADER = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local"


def log(path: Path, extra: str = "", bad: bool = False, rows: int = 400) -> Path:
    """A full-counterfactual log of 40 clusters (an `extra` column, never read, where named; a value that
    is not a number in its last row when `bad`)."""
    lines = [HEADER + (f",{extra}" if extra else "")]
    for i in range(rows):
        changed = i % 3 == 0
        executed = "a1" if changed else "a0"
        proposed = f"-{(i * 7) % 50 / 10}" if changed else f"-{i % 40 / 10}"
        value = "x" if bad and i == rows - 1 else proposed
        lines.append(f"c{i},k{i % 40},a0,{executed},-{i % 40 / 10},{value}" + (",n" if extra else ""))
    path.write_text("\n".join(lines) + "\n")
    return path


def compare(tmp_path: Path, *arms: tuple[str, Path]):
    args = ["compare", "--reps", "1000", "--output-dir", str(tmp_path / "out"), "--no-progress"]
    for name, path in arms:
        args += ["--arm", f"{name}={path}"]
    return run_cli(*args)


def test_compare_warns_in_arm_order(tmp_path):
    arms = [(name, log(tmp_path / f"{name}.csv", extra=f"note_{name}")) for name in ("a", "b", "c", "d")]
    result = compare(tmp_path, *arms)
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "columns not used" in line]
    assert [line.split(": columns")[0].rsplit("/", 1)[-1] for line in warned] == ["a.csv", "b.csv", "c.csv", "d.csv"]


def test_compare_refuses_the_first_bad_arm_in_arm_order(tmp_path):
    good = log(tmp_path / "good.csv")
    late = log(tmp_path / "late.csv", bad=True, rows=20_000)  # refused after reading every row
    empty = tmp_path / "empty.csv"
    empty.write_text("")  # refused at once, before `late` is
    result = compare(tmp_path, ("a", good), ("b", late), ("c", empty))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and str(late) in errors[0] and "must be a finite number" in errors[0], result.stderr
