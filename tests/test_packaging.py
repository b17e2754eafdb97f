"""The package installs as declared: one list of pins (pyproject.toml), extras that match what each part
imports, SQL shipped as package data, and a built wheel that runs `autheval evaluate` and `autheval demo`
from a fresh venv, away from the checkout."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, reference_file
from tests.import_graph import runtime_imports

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
LOCAL = {"autheval", "warehouse", "assets", "dagster_project", "models", "sql", "tests", "benchmarks", "scripts"}
# Which parts of the tree may import what: core dependencies, then the extras each part is installed with.
PARTS = {
    "autheval core": (["autheval/**/*.py", "warehouse/**/*.py", "scripts/*.py"], ()),
    "autheval.raw": (["autheval/raw/**/*.py", "autheval/cli/synth.py"], ("raw",)),
    # the engine seam: Ibis (DuckDB) and, for --engine spark, pyspark (imported only when Spark is asked for)
    "engine seam": (["warehouse/engine.py"], ("ibis", "spark")),
    # the report's plots (matplotlib, imported inside the plotting functions) are drawn by the lake's assets
    "lake": (["assets/**/*.py", "dagster_project/**/*.py", "autheval/reporting/report/*.py"], ("lake",)),
    "models": (["models/**/*.py"], ("models", "lake")),
    # tests and benchmarks exercise every part: `make install` installs them with every extra
    "tests and benchmarks": (["tests/**/*.py", "benchmarks/**/*.py"], tuple(PROJECT["optional-dependencies"])),
}
# Pinned packages no code imports yet, and the open issue that needs each (anything else pinned is used).
NEEDED_BY = {
    "pydantic": "issue 8 (the declared local rules file)",
    "pyyaml": "issue 8 (the declared local rules file)",
    "torch": "issue 9 (models)",
    "transformers": "issue 9",
    "deepspeed": "issue 9",
    "peft": "issue 9",
    "tokenizers": "issue 9 (tiny test models)",
    "accelerate": "issue 9",
    "scikit-learn": "issue 9 (readout)",
    "ibis-framework": "issue 11 (engine seam)",
    "sqlglot": "issue 11",
    "pandas": "issue 8 (row-wise benchmark baseline)",
    "dagster-webserver": "`autheval ui` runs `dagster dev`",
    "dagster-dg-cli": "`dg check defs` in tests",
    "pytest-xdist": "`make test` runs the suite on every core",
    "ruff": "`make lint` (lint and format)",
    "mypy": "`make lint` (types of the core packages)",
    "types-pyyaml": "mypy's stubs for PyYAML",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _requirements(extras=()) -> list[str]:
    """Core dependencies plus the named extras, with extras that name this project expanded."""
    found, todo, seen = list(PROJECT["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in PROJECT["optional-dependencies"][extra]:
            if _name(req) == _name(PROJECT["name"]):
                todo += re.search(r"\[(.*)\]", req).group(1).split(",")
            else:
                found.append(req)
    return found


def _imports(path: Path) -> set[str]:
    """The top-level names `path` imports when it runs (an `if TYPE_CHECKING:` block never runs: the type
    checker's own stubs and the libraries' internals it names there are not the part's dependencies)."""
    names = set()
    for node in runtime_imports(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - LOCAL - {"__future__"}


def test_pyproject_is_the_one_list_of_pins():
    assert not (ROOT / "requirements.txt").exists(), "requirements.txt repeats pyproject.toml's pins"
    for req in _requirements(PROJECT["optional-dependencies"]):
        if _name(req) != _name(PROJECT["name"]):
            assert re.search(r"==\d", req), f"{req!r} is not pinned"
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps" not in makefile and "requirements" not in makefile
    assert re.search(r"pip install .*-e '\.\[\$\(EXTRAS\)\]'", makefile)
    extras = re.search(r"^EXTRAS := (.*)$", makefile, re.M).group(1).split(",")
    assert set(extras) >= {"lake", "models", "dev"} and set(extras) <= set(PROJECT["optional-dependencies"])
    # torch is installed on its own first (a bare torch requirement pulls a CUDA build), pin read from pyproject
    assert not re.search(r"pip install[^\n]*torch==", makefile) and "pip install -q $(TORCH)" in makefile
    assert [r for r in _requirements(["models"]) if _name(r) == "torch"] == ["torch==2.13.0"]


def test_extras_match_what_each_part_imports():
    distributions = importlib.metadata.packages_distributions()
    allowed: dict[Path, set[str]] = {}  # a file may import what any part it belongs to declares
    for patterns, extras in PARTS.values():
        declared = {_name(r) for r in _requirements(extras)}
        for pattern in patterns:
            for path in ROOT.glob(pattern):
                allowed.setdefault(path, set()).update(declared)
    problems, used = [], set()
    for path, declared in sorted(allowed.items()):
        for module in _imports(path):
            names = {_name(d) for d in distributions.get(module, [module])}
            used |= names
            if not names & declared:
                problems.append(
                    f"{path.relative_to(ROOT)} imports {module} ({', '.join(sorted(names))}), "
                    "which its part of the tree does not declare"
                )
    assert not problems, "\n".join(sorted(set(problems)))
    pinned = {_name(r) for r in _requirements(PROJECT["optional-dependencies"])} - {_name(PROJECT["name"])}
    unused = sorted(pinned - used - set(NEEDED_BY))
    assert not unused, f"pinned but imported nowhere and needed by no open issue: {unused}"


def test_installed_versions_are_the_pins_and_pip_check_is_clean():
    for req in _requirements(PROJECT["optional-dependencies"]):
        name, _, version = req.partition("==")
        name = re.sub(r"\[.*\]", "", name)
        if version:
            try:
                installed = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue  # an extra this environment was not installed with
            assert installed.split("+")[0] == version, f"{name} {installed} installed, {version} pinned"
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sql_is_package_data_read_through_importlib_resources():
    shipped = {
        f"{d.name}/{p.name}"
        for d in importlib.resources.files("sql").iterdir()
        if d.is_dir()
        for p in d.iterdir()
        if p.name.endswith(".sql")
    }
    assert shipped == {str(p.relative_to(ROOT / "sql")) for p in (ROOT / "sql").glob("*/*.sql")} and len(shipped) > 20
    assert PYPROJECT["tool"]["setuptools"]["package-data"]["sql"] == ["*/*.sql"]
    assert "sql" in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]


def test_ci_runs_the_wheel_smoke_test():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)  # make test runs the whole suite, this file included
    assert "not slow" not in PYPROJECT["tool"]["pytest"]["ini_options"].get("addopts", "")
    makefile = (ROOT / "Makefile").read_text()
    # the whole suite, on every core, after the lint (which installs)
    assert "\ntest: lint\n\t$(BIN)/python -m pytest -n auto --dist loadfile\n" in makefile
    assert "\nlint: install\n" in makefile


# --- the wheel, installed into a fresh venv, run away from the checkout ---------------------------------

BUILD_INPUTS = ("pyproject.toml", "README.md", "autheval", "warehouse", "assets", "dagster_project", "models", "sql")


def _build_wheel(tmp: Path) -> Path:
    """Build from a copy of what the build reads, so nothing (build/, egg-info) lands in the checkout."""
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "lake", ".*")  # the build compiles its own
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        elif path.exists():
            shutil.copy2(path, src / name)
    try:  # build offline with this environment's setuptools when it is recent enough (74.1: ext-modules)
        version = tuple(int(p) for p in importlib.metadata.version("setuptools").split(".")[:2])
        isolation = [] if version < (74, 1) else ["--no-build-isolation"]
    except importlib.metadata.PackageNotFoundError:
        isolation = []
    dist = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    (wheel,) = dist.glob("autheval_lake-*.whl")
    return wheel


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A new venv holding only the wheel; the dependencies (already installed here) are reached through
    a .pth line naming this environment's site-packages, read after the venv's own (so the wheel's
    packages win, and this environment's editable checkout, hooked by its own .pth files, stays out)."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "_deps_from_the_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.slow
def test_built_wheel_runs_evaluate_and_demo_outside_the_checkout(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"sql/{p.relative_to(ROOT / 'sql')}" for p in (ROOT / "sql").glob("*/*.sql")} <= set(names)
    assert "autheval/data/reference/manifest.json" in names or any(n.startswith("autheval/data/") for n in names)
    assert not any("/lake/" in n for n in names)
    assert any(n.startswith("autheval/estimation/_stream_counts") and n.endswith(".so") for n in names), (
        "the wheel lacks the compiled counting loop (autheval/estimation/_stream_counts.c)"
    )

    venv = _fresh_venv(tmp_path, wheel)
    work = tmp_path / "work"  # outside the source tree: nothing can be imported from the checkout
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", DAGSTER_HOME=str(tmp_path / "dagster_home"))

    def run(*args):
        return subprocess.run(
            [str(venv / "bin" / "autheval"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )

    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import autheval, sql, warehouse, dagster_project; "
            "print(autheval.__file__, sql.__file__, warehouse.__file__, dagster_project.__file__)",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where

    version = run("--version")
    assert (
        version.returncode == 0 and version.stdout.strip() == f"autheval {importlib.metadata.version('autheval-lake')}"
    )

    evaluated = run(
        "evaluate", "--input", str(reference_file("authority_log_example")), "--output-dir", "out", "--reps", "1000"
    )
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads((work / "out" / "summary.json").read_text())
    assert summary["bootstrap_reps"] == 1000 and summary["metrics"]["Delta_authority"]["available"]

    demo = run("demo", "--lake", "lake", "--reps", "200")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Paired contrasts on identical clusters" in demo.stdout
    assert (work / "lake" / "reports" / "report.html").is_file()
    assert (work / "lake" / "autheval.duckdb").is_file()
