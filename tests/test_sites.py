"""Sites that keep their records (autheval/sites/, `autheval site keygen|export`, `autheval pool`):
parity of pooled exports with one evaluation of all records, nothing identifying in an export, and the
hub's one-line refusals (unsigned, unregistered key, altered, replayed, partial, same site twice, other
software or seed, a suppressed cell)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from autheval.cli.main import main
from autheval.estimation.analytic import delta_method_rows
from autheval.estimation.estimators import estimate
from autheval.records.read import read_records

SITES = ("north", "south", "west")
SEED = 4242
REPS = 200
COLUMNS = (
    "case_id",
    "cluster_id",
    "proposed_action",
    "executed_action",
    "utility_executed_local",
    "utility_proposed_local",
    "utility_proposed_global",
)


def _site_rows(site: str, n_clusters: int, rng) -> list[dict]:
    rows = []
    for c in range(n_clusters):
        for k in range(int(rng.integers(2, 7))):
            proposed = int(rng.integers(0, 4))
            changed = rng.random() < 0.35
            executed = (proposed + int(rng.integers(1, 4))) % 4 if changed else proposed
            u_exec = float(rng.normal(-2.0, 1.0))
            rows.append(
                {
                    "case_id": f"{site}-case-{c:03d}-{k}",
                    "cluster_id": f"{site}-cl-{c:03d}",
                    "proposed_action": f"a{proposed}",
                    "executed_action": f"a{executed}",
                    "utility_executed_local": repr(u_exec),
                    "utility_proposed_local": repr(float(rng.normal(-1.5, 1.2)) if changed else u_exec),
                    "utility_proposed_global": repr(float(rng.normal(-1.0, 1.0))),
                }
            )
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Three sites' logs (each log.csv in its own folder) and the pooled log with site-namespaced ids."""
    root = tmp_path_factory.mktemp("sites")
    rng = np.random.default_rng(7)
    per_site, pooled = {}, []
    for site, g in zip(SITES, (14, 21, 17)):
        rows = _site_rows(site, g, rng)
        per_site[site] = _write(root / site / "log.csv", rows)
        pooled += [{**r, "cluster_id": f"{site}:{r['cluster_id']}", "case_id": f"{site}:{r['case_id']}"} for r in rows]
    return root, per_site, _write(root / "all" / "log.csv", pooled)


def _run(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def signed(logs, tmp_path_factory):
    """Each site's key and signed export; the hub's trust folder of their public keys."""
    _, per_site, _ = logs
    root = tmp_path_factory.mktemp("signed")
    trust = root / "trust"
    trust.mkdir()
    exports = {}
    for site, log in per_site.items():
        assert _run("site", "keygen", "--out", root / f"key-{site}") == 0
        shutil.copy(root / f"key-{site}" / "site.pub", trust / f"{site}.pub")
        out = root / f"export-{site}"
        assert _export(log, site, out, root / f"key-{site}" / "site.key", seed=SEED, reps=REPS) == 0
        exports[site] = out
    return root, trust, exports


def _export(log, site: str, out, key, *extra, seed=None, reps=None) -> int:
    """`autheval site export` of one site's log (the flags left out when None), and any `extra` flags."""
    argv = ["site", "export", "--input", log, "--site", site, "--out", out, *extra]
    for flag, value in (("--key", key), ("--seed", seed), ("--replicates", reps)):
        argv += [flag, value] if value is not None else []
    return _run(*argv)


def _pool(signed, tmp_path, *folders, extra=()):
    _, trust, exports = signed
    folders = folders or tuple(exports.values())
    argv = ["pool", "--trust", trust, "--output-dir", tmp_path / "hub", *extra]
    for f in folders:
        argv += ["--export", f]
    return _run(*argv)


def _estimates(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(text: str):
    return None if text in ("", "NA") else float(text)


def test_pooled_exports_equal_one_evaluation(logs, signed, tmp_path):
    """Points and delta-method intervals of the pooled exports equal those of all records evaluated at once
    (1e-12, both units, every metric); the per-site rows and the heterogeneity are written beside."""
    _, _, pooled_log = logs
    assert _pool(signed, tmp_path) == 0
    rows = _estimates(tmp_path / "hub" / "estimates.csv")
    records = read_records(pooled_log)
    one = estimate([records], scheme="poisson", reps=REPS, seed=SEED)
    delta = {(r["unit"], r["metric"]): r for r in delta_method_rows([records])}
    pooled = [r for r in rows if r["source"] == "pooled"]
    assert len(pooled) == 32 and {r["interval_method"] for r in pooled} == {"bootstrap_poisson", "delta_method"}
    checked = 0
    for r in pooled:
        want = one.estimate("log", r["unit"], r["metric"])
        assert r["available"] == str(want["available"])
        if want["estimate"] is None:
            assert r["estimate"] in ("", "NA")
            continue
        assert _num(r["estimate"]) == pytest.approx(want["estimate"], abs=1e-12, rel=1e-12)
        assert int(r["n_clusters"]) == records.n_clusters == 52
        if r["interval_method"] == "delta_method":
            d = delta[(r["unit"], r["metric"])]
            for end in ("ci_lower", "ci_upper"):
                assert _num(r[end]) == pytest.approx(d[end], abs=1e-12, rel=1e-12)
            checked += 1
    assert checked == 16
    assert {r["source"] for r in rows} == {"pooled", *(f"site:{s}" for s in SITES)}
    manifests = {r["data_sha256"] for r in pooled}
    assert len(manifests) == 1 and all(f"{s}=" in next(iter(manifests)) for s in SITES)
    het = _estimates(tmp_path / "hub" / "heterogeneity.csv")
    assert [h["unit"] for h in het] == ["image_weighted", "cluster_equal"] and all(h["sites"] == "3" for h in het)
    assert 0.0 <= float(het[0]["i_squared"]) <= 1.0
    summary = json.loads((tmp_path / "hub" / "summary.json").read_text())
    assert [e["site"] for e in summary["exports"]] == list(SITES)


def test_pooled_bootstrap_is_the_site_namespaced_poisson_bootstrap_bit_for_bit(logs, signed, tmp_path):
    """The pooled replicates are, to the bit, the poisson bootstrap of all records in one process with
    each site's clusters weighted by its namespaced stream (autheval.sites.export.site_seed) over its
    ranks: the combined record's statistics matrix, cut at the site boundaries of the namespaced ids."""
    import pyarrow as pa

    from autheval.estimation.bootstrap import one_blas_thread, poisson_products
    from autheval.estimation.estimators import MATRIX_TO_SUMS
    from autheval.records.cluster_stats import register_cluster_stats
    from autheval.sites.export import site_seed
    from warehouse import sql

    _, _, pooled_log = logs
    assert _pool(signed, tmp_path) == 0
    records = read_records(pooled_log)
    con = sql.connect(threads=1)
    register_cluster_stats(con, [records])
    point = sql.run(con, "estimates/replicates_point")
    con.sql(sql.load_sql("records/cluster_matrix")).create_view("cluster_matrix")
    m = con.sql("SELECT * FROM cluster_matrix ORDER BY matrix_row").arrow().read_all()
    ids = [r[0] for r in con.sql("SELECT cluster_id FROM cluster_stats ORDER BY cluster_rank").fetchall()]
    matrix = np.column_stack([m.column(c).to_numpy() for c in MATRIX_TO_SUMS])
    sums = np.zeros((REPS, len(MATRIX_TO_SUMS)))
    for site in SITES:
        at = [i for i, c in enumerate(ids) if c.startswith(f"{site}:")]
        assert at == list(range(at[0], at[-1] + 1))  # namespaced ids: each site's clusters are one run of ranks
        with one_blas_thread():
            sums = sums + poisson_products(site_seed(SEED, site), 0, REPS, matrix[at[0] : at[-1] + 1])
    block = {"analysis": pa.array(["log"] * REPS), "rep": pa.array(np.arange(REPS, dtype=np.int64))}
    for j, c in enumerate(MATRIX_TO_SUMS.values()):
        block[c] = pa.array(sums[:, j])
    con.register("reps_block", pa.table(block))
    con.register("point_block", point)
    con.sql("SELECT * FROM point_block UNION ALL BY NAME SELECT * FROM reps_block").create_view("replicate_sums")
    sql.to_table(con, "replicate_metrics", "estimates/replicate_metrics")
    want = {(r["unit"], r["metric"]): r for r in sql.rows(con, "estimates/intervals", {"lower": 0.025, "upper": 0.975})}
    boot = [
        r
        for r in _estimates(tmp_path / "hub" / "estimates.csv")
        if r["source"] == "pooled" and r["interval_method"] == "bootstrap_poisson" and r["ci_lower"] not in ("", "NA")
    ]
    assert len(boot) == 16
    for r in boot:
        w = want[(r["unit"], r["metric"])]
        assert float(r["ci_lower"]).hex() == float(w["ci_lower"]).hex()
        assert float(r["ci_upper"]).hex() == float(w["ci_upper"]).hex()


def test_no_case_or_cluster_id_in_any_exported_file(logs, signed):
    import pyarrow.parquet as pq

    _, per_site, _ = logs
    _, _, exports = signed
    for site, folder in exports.items():
        ids = set()
        with per_site[site].open() as f:
            for row in csv.DictReader(f):
                ids.update((row["case_id"], row["cluster_id"]))
        names = sorted(p.name for p in folder.iterdir())
        assert names == ["manifest.json", "manifest.sig", "replicates.parquet", "statistics.json"]
        for path in folder.iterdir():
            data = path.read_bytes()
            texts = [data.decode("latin-1")]
            if path.suffix == ".parquet":
                table = pq.read_table(path)
                assert table.num_rows == REPS  # one row per replicate, none per cluster
                texts.append(json.dumps(table.to_pylist()))
            for text in texts:
                assert not [i for i in ids if i in text], path
                assert "-cl-" not in text and "-case-" not in text


def _copy(folder: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _refused(capsys, code: int, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err


def test_hub_refuses_unsigned_unregistered_altered_partial(logs, signed, tmp_path, capsys):
    root, trust, exports = signed
    north = exports["north"]
    unsigned = _copy(north, tmp_path, "unsigned")
    os.unlink(unsigned / "manifest.sig")
    _refused(capsys, _pool(signed, tmp_path, unsigned), "unsigned")
    # signed by a key the hub never registered
    _, per_site, _ = logs
    assert _run("site", "keygen", "--out", tmp_path / "rogue") == 0
    rogue = tmp_path / "rogue-export"
    assert _export(per_site["north"], "north", rogue, tmp_path / "rogue" / "site.key", seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, rogue), "not registered")
    # any file altered after signing
    for name in ("manifest.json", "statistics.json", "replicates.parquet"):
        altered = _copy(north, tmp_path, f"altered-{name}")
        data = bytearray((altered / name).read_bytes())
        data[len(data) // 2] ^= 1
        (altered / name).write_bytes(bytes(data))
        _refused(capsys, _pool(signed, tmp_path, altered), "altered")
    partial = _copy(north, tmp_path, "partial")
    os.unlink(partial / "replicates.parquet")
    _refused(capsys, _pool(signed, tmp_path, partial), "partial")
    extra = _copy(north, tmp_path, "extra")
    (extra / "clusters.csv").write_text("cluster_id\nx\n")
    _refused(capsys, _pool(signed, tmp_path, extra), "does not name")
    linked = _copy(north, tmp_path, "linked")
    os.unlink(linked / "statistics.json")
    os.symlink(north / "statistics.json", linked / "statistics.json")
    _refused(capsys, _pool(signed, tmp_path, linked), "not a plain file")
    assert not (tmp_path / "hub").exists()  # nothing pooled


def test_hub_refuses_replay_same_site_and_other_seed(logs, signed, tmp_path, capsys):
    root, trust, exports = signed
    _, per_site, _ = logs
    replay = _copy(exports["north"], tmp_path, "replay")
    _refused(capsys, _pool(signed, tmp_path, exports["north"], replay), "replay")
    again = tmp_path / "again"  # the south records exported as north a second time (another export of north)
    assert _export(per_site["south"], "north", again, root / "key-north" / "site.key", seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, exports["north"], again), "both exports of site 'north'")
    other = tmp_path / "other-seed"
    assert _export(per_site["south"], "south", other, root / "key-south" / "site.key", seed=SEED + 1, reps=REPS) == 0
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, exports["north"], other), "seed")
    _refused(capsys, _pool(signed, tmp_path, exports["north"], extra=("--seed", SEED + 1)), "--seed")
    assert not (tmp_path / "hub").exists()


def test_other_software_version_is_refused(logs, signed, tmp_path, capsys, monkeypatch):
    import autheval

    root, _, exports = signed
    _, per_site, _ = logs
    monkeypatch.setattr(autheval, "__version__", "9.9.9")
    newer = tmp_path / "newer"
    assert _export(per_site["south"], "south", newer, root / "key-south" / "site.key", seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, exports["north"], newer), "software")


def test_site_below_the_minimum_counts_is_suppressed_and_refused(logs, signed, tmp_path, capsys):
    root, _, _ = signed
    _, per_site, _ = logs
    small = tmp_path / "small"
    assert (
        _export(
            per_site["north"],
            "north",
            small,
            root / "key-north" / "site.key",
            "--min-clusters",
            15,
            seed=SEED,
            reps=REPS,
        )
        == 0
    )
    stats = json.loads((small / "statistics.json").read_text())
    assert stats["analyses"] == [
        {"analysis": "log", "suppressed": True, "reason": "fewer than 15 clusters (the declared --min-clusters)"}
    ]
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, small), "suppressed")
    changed = tmp_path / "changed"
    assert (
        _export(
            per_site["north"],
            "north",
            changed,
            root / "key-north" / "site.key",
            "--min-changed-clusters",
            100,
            reps=REPS,
        )
        == 0
    )
    assert json.loads((changed / "statistics.json").read_text())["analyses"][0]["suppressed"] is True


def test_keygen_and_export_refusals(logs, tmp_path, capsys):
    _, per_site, _ = logs
    assert _run("site", "keygen", "--out", tmp_path / "k") == 0
    assert oct((tmp_path / "k" / "site.key").stat().st_mode & 0o777) == "0o600"
    capsys.readouterr()
    _refused(capsys, _run("site", "keygen", "--out", tmp_path / "k"), "never overwritten")
    key = tmp_path / "k" / "site.key"
    base = ["site", "export", "--input", per_site["west"], "--key", key, "--replicates", REPS]
    _refused(capsys, _run(*base, "--site", "all", "--out", tmp_path / "e1"), "--site")
    _refused(capsys, _run(*base, "--site", "a:b", "--out", tmp_path / "e1"), "--site")
    _refused(capsys, _run(*base, "--site", " west", "--out", tmp_path / "e1"), "--site")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    _refused(capsys, _run(*base, "--site", "west", "--out", tmp_path / "full"), "not empty")
    _refused(capsys, _run(*base, "--site", "west", "--out", per_site["west"].parent), "input")
    os.chmod(key, 0o644)
    _refused(capsys, _run(*base, "--site", "west", "--out", tmp_path / "e2"), "chmod 600")
    (tmp_path / "not-a-key").write_text("hello")
    os.chmod(tmp_path / "not-a-key", 0o600)
    bad = ["site", "export", "--input", per_site["west"], "--key", tmp_path / "not-a-key"]
    _refused(capsys, _run(*bad, "--site", "west", "--out", tmp_path / "e3"), "PEM")
    assert not (tmp_path / "e1").exists() and not (tmp_path / "e2").exists() and not (tmp_path / "e3").exists()


def test_trust_folder_refusals(signed, tmp_path, capsys):
    _, _, exports = signed
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(
        capsys,
        _run("pool", "--trust", empty, "--export", exports["north"], "--output-dir", tmp_path / "o"),
        "no registered",
    )
    (empty / "bad.pub").write_text("garbage")
    _refused(
        capsys, _run("pool", "--trust", empty, "--export", exports["north"], "--output-dir", tmp_path / "o"), "bad.pub"
    )
    _refused(capsys, _pool(signed, tmp_path, exports["north"], extra=("--output-dir", exports["north"])), "inside")


def _resign(folder: Path, tmp_path: Path, name: str, key: Path, stats=None, manifest=None, replicates=None) -> Path:
    """A copy of `folder` with statistics.json / manifest.json / replicates.parquet edited by the callables
    given, the manifest's file hashes updated and re-signed with `key` (an attacker holding a registered key)."""
    import hashlib

    from autheval.sites.signing import load_private_key, public_hex, sign

    target = _copy(folder, tmp_path, name)
    if stats is not None:
        value = json.loads((target / "statistics.json").read_text())
        (target / "statistics.json").write_text(json.dumps(stats(value) or value))
    if replicates is not None:
        import pyarrow.parquet as pq

        pq.write_table(replicates(pq.read_table(target / "replicates.parquet")), target / "replicates.parquet")
    m = json.loads((target / "manifest.json").read_text())
    for f in ("statistics.json", "replicates.parquet"):
        m["files"][f] = hashlib.sha256((target / f).read_bytes()).hexdigest()
    private = load_private_key(key)
    m["signer"] = public_hex(private)
    if manifest is not None:
        m = manifest(m) or m
    data = json.dumps(m).encode()
    (target / "manifest.json").write_bytes(data)
    (target / "manifest.sig").write_text(sign(private, data) + "\n")
    return target


def _entry(s):
    return s["analyses"][0]


def _set(path, value):
    def edit(s):
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return edit


def test_signed_malformed_export_is_one_line_naming_file_and_field(signed, tmp_path, capsys):
    """A re-signed export with a field missing or of another type or shape: one line naming the file and the
    field path, exit 2, never a traceback; nothing pooled."""
    root, _, exports = signed
    key = root / "key-north" / "site.key"
    north = exports["north"]
    cases = [
        ("no-analysis-key", {"stats": lambda s: _entry(s).pop("analysis") and None}, "analyses[0].analysis is missing"),
        ("record-empty", {"stats": _set(["analyses", 0, "record"], {})}, "analyses[0].record.schema is missing"),
        ("analyses-ints", {"stats": _set(["analyses"], [1, 2])}, "analyses[0] must be an object"),
        (
            "comoments",
            {"stats": _set(["analyses", 0, "units", "image_weighted", "comoments"], [[1]])},
            "analyses[0].units.image_weighted.comoments must be an 8x8 array of finite numbers",
        ),
        ("mean-text", {"stats": _set(["analyses", 0, "units", "cluster_equal", "mean"], "x")}, "mean must be an 8"),
        ("totals-text", {"stats": _set(["analyses", 0, "totals", "w_gap"], "1")}, "totals.w_gap must be a finite"),
        ("reps-abc", {"manifest": _set(["reps"], "abc")}, "manifest.json: reps must be a whole number"),
        ("seed-float", {"manifest": _set(["seed"], 1.5)}, "manifest.json: seed must be a whole number"),
        ("files-list", {"manifest": _set(["files"], [])}, "manifest.json: files must be an object"),
        ("software-none", {"manifest": _set(["software"], None)}, "manifest.json: software must be an object"),
        (
            "rep-dtype",
            {"replicates": lambda t: t.set_column(1, "rep", t.column("rep").cast("int32"))},
            "replicates.parquet: column 'rep': must be of type int64",
        ),
        (
            "rep-short",
            {"replicates": lambda t: t.slice(0, REPS - 1)},
            f"replicates.parquet: must hold {REPS:,} replicates",
        ),
    ]
    for name, edits, needle in cases:
        folder = _resign(north, tmp_path, name, key, **edits)
        code = _pool(signed, tmp_path, folder)
        err = capsys.readouterr().err.strip()
        assert code == 2 and needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, (name, err)
        assert str(folder) in err, (name, err)
    assert not (tmp_path / "hub").exists()


def test_signed_impossible_values_are_refused(signed, tmp_path, capsys):
    """Re-signed values no site could export (counts negative or inconsistent, totals that disagree with the
    counts or the means, sums that overflow, non-finite replicate sums) are refused in one line; no inf is
    ever written to estimates.csv."""
    import pyarrow as pa

    root, _, exports = signed
    key = root / "key-north" / "site.key"
    north = exports["north"]

    def overflow(s):
        _entry(s)["totals"]["w_gap"] = 1e308
        _entry(s)["totals"]["w_n"] = 1e-308

    def inf_rep(t):
        col = t.column("w_gap").to_numpy().copy()
        col[3] = np.inf
        return t.set_column(t.column_names.index("w_gap"), "w_gap", pa.array(col))

    cases = [
        ("overflow", {"stats": overflow}, "totals.w_n must equal"),
        ("neg-clusters", {"stats": _set(["analyses", 0, "n_clusters"], -5)}, "analyses[0].n_clusters must be"),
        ("frac-cases", {"stats": _set(["analyses", 0, "record", "n_cases"], 10.5)}, "record.n_cases must be"),
        ("changed-gt", {"stats": lambda s: _entry(s).update(n_changed_clusters=10**6)}, "n_changed_clusters must be"),
        ("changed-cases", {"stats": lambda s: _entry(s)["record"].update(n_changed=0)}, "n_changed"),
        ("local-gt", {"stats": lambda s: _entry(s)["record"].update(n_local=10**9)}, "record.n_local must be"),
        ("mean-off", {"stats": lambda s: _entry(s)["units"]["image_weighted"]["mean"].__setitem__(4, 1e6)}, "mean[4]"),
        (
            "neg-var",
            {"stats": lambda s: _entry(s)["units"]["cluster_equal"]["comoments"][2].__setitem__(2, -1.0)},
            "no negative",
        ),
        ("inf-rep", {"replicates": inf_rep}, "column 'w_gap'"),
    ]
    for name, edits, needle in cases:
        folder = _resign(north, tmp_path, name, key, **edits)
        code = _pool(signed, tmp_path, folder)
        err = capsys.readouterr().err.strip()
        assert code == 2 and needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, (name, err)
    assert not (tmp_path / "hub").exists()

    # totals huge but consistent with the means at two sites: their sum overflows, refused in one line, no inf
    def huge(s):
        e = _entry(s)
        e["totals"]["w_gap"] = 1.7e308
        e["units"]["image_weighted"]["mean"][4] = 1.7e308 / e["n_clusters"]

    big_north = _resign(north, tmp_path, "big-north", key, stats=huge)
    big_south = _resign(exports["south"], tmp_path, "big-south", root / "key-south" / "site.key", stats=huge)
    _refused(capsys, _pool(signed, tmp_path, big_north, big_south), "overflow")
    assert not (tmp_path / "hub").exists()


def test_a_key_signs_for_its_own_site_only(logs, signed, tmp_path, capsys):
    """The north key signing a south export is refused; the manifest's signer must be the signing key; a
    trust folder registering one key twice is refused."""
    root, trust, exports = signed
    _, per_site, _ = logs
    forged = tmp_path / "forged-south"
    argv = ["site", "export", "--input", per_site["south"], "--site", "south", "--out", forged]
    assert _run(*argv, "--key", root / "key-north" / "site.key", "--seed", SEED, "--replicates", REPS) == 0
    capsys.readouterr()
    _refused(capsys, _pool(signed, tmp_path, exports["north"], forged), "signed by the key registered for site 'north'")
    # the same via re-signing the real south export with the north key
    resigned = _resign(exports["south"], tmp_path, "south-by-north", root / "key-north" / "site.key")
    _refused(capsys, _pool(signed, tmp_path, resigned), "a key signs for its own site only")
    # a manifest naming another signer than the key that signed it
    other = _resign(
        exports["north"],
        tmp_path,
        "other-signer",
        root / "key-north" / "site.key",
        manifest=_set(["signer"], "ab" * 32),
    )
    _refused(capsys, _pool(signed, tmp_path, other), "signer names another key")
    # one key registered for two sites
    twice = tmp_path / "twice"
    shutil.copytree(trust, twice)
    shutil.copy(trust / "north.pub", twice / "south-alias.pub")
    code = _run("pool", "--trust", twice, "--export", exports["north"], "--output-dir", tmp_path / "hub")
    _refused(capsys, code, "the same key")
    bad = tmp_path / "badname"
    bad.mkdir()
    shutil.copy(trust / "north.pub", bad / "all.pub")
    _refused(
        capsys, _run("pool", "--trust", bad, "--export", exports["north"], "--output-dir", tmp_path / "hub"), "all.pub"
    )
    assert not (tmp_path / "hub").exists()


def test_export_replicates_refusal_names_replicates(logs, tmp_path, capsys):
    _, per_site, _ = logs
    for value in (0, -1, 10**7):
        code = _export(per_site["west"], "west", tmp_path / "e", None, reps=value)
        err = capsys.readouterr().err.strip()
        assert code == 2 and "--replicates" in err and "--reps" not in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "e").exists()
