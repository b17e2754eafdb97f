"""The opt-in per-cluster export (issue 29, item 5): `site export --per-cluster --salt-file F` adds one row per
cluster (its id as HMAC-SHA256 under the site's salt), so the hub runs the exact `reference` and `evaluator`
schemes (`pool --scheme`): its intervals equal `evaluate`'s of all the sites' records (ids `<site>:<id>`) to
the bit. And the one-line refusals: mixed exports, a bad salt file, malformed per-cluster files."""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from autheval.cli.main import main
from tests.test_sites import SITES, _namespaced, _site_rows, _write

SEED = 4242
REPS = 300
COMPARED = ("estimate", "ci_lower", "ci_upper", "p_value", "n", "n_clusters", "available", "status", "reason")


def _run(*argv) -> int:
    return main([str(a) for a in argv])


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _salt(path: Path, mode: int = 0o600, data: bytes | None = None) -> Path:
    path.write_bytes(os.urandom(32) if data is None else data)
    os.chmod(path, mode)
    return path


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """Three sites' logs, keys, salts and per-cluster exports; the pooled log with ids `<site>:<id>`."""
    root = tmp_path_factory.mktemp("clusters")
    rng = np.random.default_rng(11)
    (root / "trust").mkdir()
    logs, pooled, exports, salts = {}, [], {}, {}
    for site, g in zip(SITES, (16, 23, 19)):
        rows = _site_rows(site, g, rng)
        logs[site] = _write(root / site / "log.csv", rows)
        pooled += _namespaced(site, rows)
        assert _run("site", "keygen", "--out", root / f"key-{site}") == 0
        shutil.copy(root / f"key-{site}" / "site.pub", root / "trust" / f"{site}.pub")
        salts[site] = _salt(root / f"salt-{site}")
        exports[site] = root / f"export-{site}"
        argv = [
            "--input",
            logs[site],
            "--site",
            site,
            "--out",
            exports[site],
            "--key",
            root / f"key-{site}" / "site.key",
        ]
        assert (
            _run(
                "site", "export", *argv, "--seed", SEED, "--replicates", 15, "--per-cluster", "--salt-file", salts[site]
            )
            == 0
        )
    return root, logs, _write(root / "all" / "log.csv", pooled), exports, salts


def _pool(root: Path, out: Path, exports, *extra) -> int:
    argv = ["pool", "--trust", root / "trust", "--output-dir", out, *extra]
    for e in exports:
        argv += ["--export", e]
    return _run(*argv)


@pytest.mark.parametrize("scheme", ["reference", "evaluator"])
def test_pooled_per_cluster_exports_give_evaluates_exact_intervals_to_the_bit(sites, tmp_path, scheme):
    root, _, pooled_log, exports, _ = sites
    assert _pool(root, tmp_path / "hub", exports.values(), "--scheme", scheme, "--reps", REPS) == 0
    argv = ["--input", pooled_log, "--scheme", scheme, "--reps", REPS, "--no-progress"]
    assert _run("evaluate", *argv, "--output-dir", tmp_path / "lake") == 0
    one = {(r["unit"], r["metric"]): r for r in _rows(tmp_path / "lake" / "estimates.csv")}
    method = f"bootstrap_{scheme}"
    pooled = [r for r in _rows(tmp_path / "hub" / "estimates.csv") if r["source"] == "pooled" and r["scheme"] == scheme]
    assert len(pooled) == 16 and {r["interval_method"] for r in pooled} == {method}
    assert sum(r["ci_lower"] not in ("", "NA") for r in pooled) >= 12
    for r in pooled:
        want = one[(r["unit"], r["metric"])]
        assert (want["scheme"], want["reps"], want["seed"]) == (r["scheme"], r["reps"], r["seed"])
        assert {c: r[c] for c in COMPARED} == {c: want[c] for c in COMPARED}, (r["unit"], r["metric"])
    site_rows = {r["source"] for r in _rows(tmp_path / "hub" / "estimates.csv") if r["scheme"] == scheme}
    assert site_rows == {"pooled", *(f"site:{s}" for s in SITES)}


def test_a_per_cluster_export_names_clusters_by_salted_hash_only(sites):
    root, logs, _, exports, salts = sites
    for site in SITES:
        with logs[site].open() as f:
            raw = list(csv.DictReader(f))
        clusters = sorted({r["cluster_id"] for r in raw})
        salt = salts[site].read_bytes()
        table = pq.read_table(exports[site] / "clusters.parquet")
        assert table.column("cluster").to_pylist() == [
            hmac.new(salt, c.encode(), hashlib.sha256).hexdigest() for c in clusters
        ]  # one row per cluster, in the site's rank order
        for path in exports[site].iterdir():
            texts = [path.read_bytes().decode("latin-1")]
            if path.suffix == ".parquet":
                texts.append(json.dumps(pq.read_table(path).to_pylist()))
            for text in texts:
                assert not [c for c in clusters if c in text] and "-case-" not in text, path
        manifest = json.loads((exports[site] / "manifest.json").read_text())
        assert manifest["per_cluster"] is True and "salt" not in json.dumps(manifest).replace("per_cluster", "")


def _refused(capsys, code: int, *needles: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and all(n in err for n in needles) and len(err.splitlines()) == 1, err


def test_mixed_exports_and_an_exact_scheme_without_clusters_are_refused(sites, tmp_path, capsys):
    root, logs, _, exports, _ = sites
    plain = tmp_path / "plain"
    argv = ["--input", logs["west"], "--site", "west", "--out", plain, "--key", root / "key-west" / "site.key"]
    assert _run("site", "export", *argv, "--seed", SEED, "--replicates", 15) == 0
    assert json.loads((plain / "manifest.json").read_text())["per_cluster"] is False
    assert not (plain / "clusters.parquet").exists()
    mixed = [exports["north"], exports["south"], plain]
    _refused(capsys, _pool(root, tmp_path / "hub", mixed), "every site opts in to --per-cluster, or none")
    _refused(capsys, _pool(root, tmp_path / "hub", mixed, "--scheme", "reference"), "must be per-cluster", str(plain))
    _refused(capsys, _pool(root, tmp_path / "hub", [plain], "--reps", 10), "--reps", "exact --scheme")
    assert not (tmp_path / "hub").exists()


def test_a_bad_salt_file_is_one_line(sites, tmp_path, capsys):
    root, logs, _, _, _ = sites
    key = root / "key-north" / "site.key"

    def export(*extra):
        argv = ["--input", logs["north"], "--site", "north", "--out", tmp_path / "out", "--key", key]
        return _run("site", "export", *argv, "--replicates", 20, *extra)

    _refused(capsys, export("--per-cluster", "--salt-file", tmp_path / "none"), "no such salt file")
    _refused(capsys, export("--per-cluster", "--salt-file", _salt(tmp_path / "empty", data=b"")), "holds 0 bytes")
    _refused(capsys, export("--per-cluster", "--salt-file", _salt(tmp_path / "short", data=b"abc")), "at least 16")
    _refused(capsys, export("--per-cluster", "--salt-file", _salt(tmp_path / "open", 0o644)), "may be read by others")
    (tmp_path / "link").symlink_to(_salt(tmp_path / "target"))
    _refused(capsys, export("--per-cluster", "--salt-file", tmp_path / "link"), "is not a plain file")
    _refused(capsys, export("--per-cluster"), "give both --per-cluster and --salt-file")
    _refused(capsys, export("--salt-file", _salt(tmp_path / "fine")), "give both --per-cluster and --salt-file")
    assert not (tmp_path / "out").exists()


def _resign(export: Path, target: Path, name: str, edit) -> Path:
    """A copy of `export` with the Parquet file `name` edited, re-signed by the site's own key."""
    from autheval.sites.signing import load_private_key, sign

    shutil.copytree(export, target)
    pq.write_table(edit(pq.read_table(target / name)), target / name)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((target / name).read_bytes()).hexdigest()
    data = json.dumps(manifest).encode()
    (target / "manifest.json").write_bytes(data)
    key = load_private_key(export.parent / f"key-{manifest['site']}" / "site.key")
    (target / "manifest.sig").write_text(sign(key, data) + "\n")
    return target


def test_signed_per_cluster_files_that_break_their_rules_are_one_line(sites, tmp_path, capsys):
    root, _, _, exports, _ = sites

    def twice(t: pa.Table) -> pa.Table:
        ids = t.column("cluster").to_pylist()
        return t.set_column(1, "cluster", pa.array([ids[0]] * 2 + ids[2:]))

    def more_cases(t: pa.Table) -> pa.Table:
        return t.set_column(2, "n", pa.compute.add(t.column("n"), 1.0))

    def raw_id(t: pa.Table) -> pa.Table:
        return t.set_column(1, "cluster", pa.array(["north-cl-000"] + t.column("cluster").to_pylist()[1:]))

    def lost_rank(t: pa.Table) -> pa.Table:
        return t.slice(1)

    cases = {
        "columns": ("clusters.parquet", lambda t: t.drop_columns(["sum_gap"]), "must hold the columns"),
        "twice": ("clusters.parquet", twice, "clusters once each"),
        "cases": ("clusters.parquet", more_cases, "cases must add up to its n_cases"),
        "raw": ("clusters.parquet", raw_id, "must be an HMAC-SHA256"),
        "ranks": ("evaluator_clusters.parquet", lost_rank, "must rank its"),
    }
    for label, (name, edit, needle) in cases.items():
        bad = _resign(exports["north"], tmp_path / label, name, edit)
        code = _pool(root, tmp_path / "hub", [bad, exports["south"]], "--scheme", "reference")
        _refused(capsys, code, needle, name)
    assert not (tmp_path / "hub").exists()


def test_sites_are_laid_out_in_the_order_evaluate_ranks_their_ids():
    """`evaluate` ranks ids `<site>:<id>` by their bytes: a site named as another's prefix plus '-' comes
    first ('-' < ':'), whatever the site names' own order."""
    from autheval.sites.clusters import site_order

    names = ["north", "north-2", "n"]
    assert sorted(names, key=site_order) == [s.split(":")[0] for s in sorted(f"{s}:x" for s in names)]
    assert sorted(names, key=site_order) != sorted(names)
