"""Sites that keep their records (autheval/sites/, `autheval site keygen|export`, `autheval pool`):
parity of pooled exports with one evaluation of all records (points and delta method to 1e-12, the
`poisson_by_site` bootstrap to the bit, paired contrasts likewise), nothing identifying in an export, the
secret-seed scheme, and the hub's one-line refusals (unsigned, unregistered key, altered, replayed,
partial, same site twice, other software, scheme or seed, a suppressed cell, contrasts of other
mechanisms)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
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
REPS = 12  # below every site's clusters (14, 21, 17): export refuses reps >= clusters under the hub's seed
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


def _namespaced(site: str, rows: list[dict]) -> list[dict]:
    """A site's rows as one lake holds them: case and cluster ids '<site>:<id>'."""
    return [{**r, "cluster_id": f"{site}:{r['cluster_id']}", "case_id": f"{site}:{r['case_id']}"} for r in rows]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Three sites' logs (each log.csv in its own folder) and the pooled log with site-namespaced ids."""
    root = tmp_path_factory.mktemp("sites")
    rng = np.random.default_rng(7)
    per_site, pooled = {}, []
    for site, g in zip(SITES, (14, 21, 17)):
        rows = _site_rows(site, g, rng)
        per_site[site] = _write(root / site / "log.csv", rows)
        pooled += _namespaced(site, rows)
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
    argv = ["site", "export", "--site", site, "--out", out, *extra]
    for flag, value in (("--input", log), ("--key", key), ("--seed", seed), ("--replicates", reps)):
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
    one = estimate([records], scheme="poisson_by_site", reps=REPS, seed=SEED)
    delta = {(r["unit"], r["metric"]): r for r in delta_method_rows([records])}
    pooled = [r for r in rows if r["source"] == "pooled"]
    assert len(pooled) == 32 and {r["interval_method"] for r in pooled} == {"bootstrap_poisson_by_site", "delta_method"}
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


def _lake_site_sums(monkeypatch) -> list:
    """Capture the replicate sums the single-lake poisson_by_site scheme forms (one (first rep, sums)
    per block of its first stream), as they go to the metric formulas."""
    from autheval.estimation import estimators

    captured = []
    real = estimators._site_poisson_blocks

    def spy(matrices, reps, site_runs):
        for first, sums in real(matrices, reps, site_runs):
            captured.append((first, [part.copy() for part in sums]))
            yield first, sums

    monkeypatch.setattr(estimators, "_site_poisson_blocks", spy)
    return captured


def _stacked(captured: list, stream: int = 0) -> np.ndarray:
    return np.vstack([sums[stream] for _, sums in sorted(captured, key=lambda block: block[0])])


def _hub_exports(signed) -> list:
    from autheval.sites.pool import read_export
    from autheval.sites.signing import trusted_keys

    _, trust, exports = signed
    trusted = trusted_keys(trust)
    return sorted((read_export(folder, trusted) for folder in exports.values()), key=lambda e: e.site)


def test_evaluate_poisson_by_site_equals_the_pooled_exports_bit_for_bit(logs, signed, tmp_path, monkeypatch):
    """`evaluate --scheme poisson_by_site` of all sites' records in one lake (cluster ids '<site>:<id>') and
    the hub's pool of three exports (each from its own `site export`) with the hub's seed: the replicate
    sums and every bootstrap interval end of both units are the same numbers (==, not approx)."""
    from autheval.estimation.by_site import sum_over_sites

    _, _, pooled_log = logs
    captured = _lake_site_sums(monkeypatch)
    argv = ["evaluate", "--input", pooled_log, "--scheme", "poisson_by_site", "--seed", SEED, "--reps", REPS]
    assert _run(*argv, "--no-progress", "--output-dir", tmp_path / "lake") == 0
    lake = _stacked(captured)
    hub = sum_over_sites(e.replicates["log"] for e in _hub_exports(signed))
    assert lake.shape == hub.shape == (REPS, 16)
    assert np.array_equal(lake, hub)
    assert not np.array_equal(lake, _hub_exports(signed)[0].replicates["log"])  # every site's clusters count

    assert _pool(signed, tmp_path) == 0
    method = "bootstrap_poisson_by_site"
    one = {(r["unit"], r["metric"]): r for r in _estimates(tmp_path / "lake" / "estimates.csv")}
    pooled = [
        r
        for r in _estimates(tmp_path / "hub" / "estimates.csv")
        if r["source"] == "pooled" and r["interval_method"] == method and r["ci_lower"] not in ("", "NA")
    ]
    assert len(pooled) == 16 and {r["unit"] for r in pooled} == {"image_weighted", "cluster_equal"}
    for r in pooled:
        w = one[(r["unit"], r["metric"])]
        assert (w["scheme"], w["interval_method"], r["scheme"]) == ("poisson_by_site", method, "poisson_by_site")
        assert float(r["ci_lower"]) == float(w["ci_lower"]) and float(r["ci_upper"]) == float(w["ci_upper"])
        assert float(r["estimate"]) == pytest.approx(float(w["estimate"]), abs=1e-12, rel=1e-12)


def test_poisson_by_site_keys_weights_by_site_not_by_global_rank(logs):
    """The scheme differs from `poisson` (weights by global rank), and each site's clusters are weighted by
    the site's own stream: moving a site's clusters under another site name changes the replicates."""
    import warnings

    _, _, pooled_log = logs
    records = read_records(pooled_log)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_site = estimate([records], scheme="poisson_by_site", reps=REPS, seed=SEED)
        poisson = estimate([records], scheme="poisson", reps=REPS, seed=SEED)
    a, b = by_site.estimate("log", "image_weighted", "J"), poisson.estimate("log", "image_weighted", "J")
    assert a["estimate"] == b["estimate"] and a["ci_lower"] != b["ci_lower"]
    assert by_site.scheme == "poisson_by_site" and by_site.seed == SEED


def test_poisson_by_site_refuses_cluster_ids_without_a_site(logs, tmp_path, capsys):
    _, per_site, _ = logs
    argv = ["evaluate", "--input", per_site["north"], "--scheme", "poisson_by_site", "--reps", 50]
    _refused(capsys, _run(*argv, "--output-dir", tmp_path / "o"), "cluster_id must be <site>:<id>")
    assert not (tmp_path / "o").exists()


def test_poisson_by_site_refuses_a_reserved_site_or_an_empty_id(logs, tmp_path, capsys):
    """`all:x` names the pooled rows' reserved name as a site; `s1:` has no id after the separator."""
    _, per_site, _ = logs
    rows = _read_rows(per_site["north"])
    for bad, needle in (
        ("all:x", "'cluster_id': the site name"),
        ("s1:", "'cluster_id': must be <site>:<id> with an id"),
    ):
        changed = [{**r, "cluster_id": bad} if i < 3 else _namespaced("s1", [r])[0] for i, r in enumerate(rows)]
        log = _write(tmp_path / bad.replace(":", "_") / "log.csv", changed)
        argv = ["evaluate", "--input", log, "--scheme", "poisson_by_site", "--reps", 50]
        code = _run(*argv, "--output-dir", tmp_path / "o")
        _refused(capsys, code, needle)
        assert not (tmp_path / "o").exists()


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


def test_exports_of_other_rules_than_the_hub_declares_are_refused(logs, signed, tmp_path, capsys):
    """A site declares the rule file its scores were made under (--rules, signed in the manifest); the hub's
    --rules refuses an export of other rules or of none, and sites declaring different rules never pool."""
    from autheval.review.rules import default_rules_text

    root, _, exports = signed
    _, per_site, _ = logs
    ours = tmp_path / "rules.yaml"
    ours.write_text(default_rules_text())
    other = tmp_path / "other-rules.yaml"
    other.write_text(default_rules_text() + "\n# the same rules, another file: another SHA-256\n")
    made = {}
    for site, rules in (("north", ours), ("south", other), ("west", ours)):
        made[site] = tmp_path / f"ruled-{site}"
        key = root / f"key-{site}" / "site.key"
        assert _export(per_site[site], site, made[site], key, "--rules", rules, seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    manifest = json.loads((made["north"] / "manifest.json").read_text())
    assert manifest["rules"]["sha256"] == hashlib.sha256(ours.read_bytes()).hexdigest()
    _refused(capsys, _pool(signed, tmp_path, made["north"], made["south"]), "rules")
    _refused(capsys, _pool(signed, tmp_path, made["north"], extra=("--rules", other)), "not the hub's --rules")
    _refused(capsys, _pool(signed, tmp_path, exports["north"], extra=("--rules", ours)), "declares no rules")
    assert not (tmp_path / "hub").exists()
    assert _pool(signed, tmp_path, made["north"], made["west"], extra=("--rules", ours)) == 0
    _refused(capsys, _export(per_site["north"], "north", tmp_path / "x", None, "--rules", tmp_path / "nope"), "nope")


def test_a_rules_flag_naming_a_folder_fifo_device_or_huge_file_is_refused_before_reading(
    logs, signed, tmp_path, capsys
):
    """`--rules` of `site export` and of `pool`: a folder, a FIFO, a device or a file past 1 MiB is refused in
    one line naming --rules and what it is (not "file not found"), before anything is read or written."""
    _, per_site, _ = logs
    folder = tmp_path / "rules-folder"
    folder.mkdir()
    fifo = tmp_path / "rules-fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate((1 << 20) + 1)
    for path, rule in ((folder, "not a plain file"), (fifo, "not a plain file"), ("/dev/zero", "not a plain file")):
        _refused(capsys, _export(per_site["north"], "north", tmp_path / "x", None, "--rules", path), rule)
        _refused(capsys, _pool(signed, tmp_path, extra=("--rules", path)), rule)
    _refused(capsys, _pool(signed, tmp_path, extra=("--rules", huge)), "larger than")
    assert not (tmp_path / "x").exists() and not (tmp_path / "hub").exists()


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
        ("stats-extra", {"stats": _set(["note"], "x")}, "statistics.json: note is not a field of this file"),
        ("manifest-extra", {"manifest": _set(["note"], "x")}, "manifest.json: note is not a field of this file"),
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


def test_hub_seed_replicates_reaching_the_clusters_are_refused(logs, tmp_path, capsys):
    """Under the hub's seed the hub knows the weights: replicates >= clusters (north has 14; the default
    5000 too) would let it solve the replicate sums for every cluster's sums. Refused, naming --replicates
    and pointing to --secret-seed; 13 replicates, the secret seed and the per-cluster opt-in pass."""
    _, per_site, _ = logs
    for reps in (14, None):
        code = _export(per_site["north"], "north", tmp_path / "e", None, seed=SEED, reps=reps)
        _refused(capsys, code, "--replicates")
        assert not (tmp_path / "e").exists()
    code = _export(per_site["north"], "north", tmp_path / "e", None, seed=SEED, reps=14)
    err = capsys.readouterr().err
    assert code == 2 and "14 clusters" in err and "--secret-seed" in err, err
    assert _export(per_site["north"], "north", tmp_path / "fewer", None, seed=SEED, reps=13) == 0
    assert _export(per_site["north"], "north", tmp_path / "secret", None, "--secret-seed", reps=14) == 0


def test_a_protocol_that_is_not_a_regular_file_is_refused_before_reading(signed, tmp_path, capsys):
    """A FIFO as --protocol would block the read forever (site export and pool): one line instead."""
    root, trust, exports = signed
    fifo = tmp_path / "protocol.yaml"
    os.mkfifo(fifo)
    monitor = tmp_path / "logs"
    monitor.mkdir()
    code = _run("site", "export", "--monitor", monitor, "--protocol", fifo, "--site", "north", "--out", tmp_path / "e")
    _refused(capsys, code, "is not a regular file")
    pool = ["pool", "--trust", trust, "--export", exports["north"], "--protocol", fifo]
    _refused(capsys, _run(*pool, "--output-dir", tmp_path / "hub"), "is not a regular file")
    assert not (tmp_path / "e").exists() and not (tmp_path / "hub").exists()


def test_pool_into_a_reused_output_dir_leaves_no_stale_result(signed, tmp_path):
    """The files of an earlier pool that this one does not write (a monitor table, a contrast) are removed;
    other files stay."""
    _, trust, exports = signed
    hub = tmp_path / "hub"
    hub.mkdir()
    for name in ("monitor.csv", "monitor_decisions.csv", "paired_contrast.csv", "notes.txt"):
        (hub / name).write_text("old\n")
    argv = ["pool", "--trust", trust, "--output-dir", hub]
    assert _run(*argv, *[x for e in exports.values() for x in ("--export", e)]) == 0
    assert sorted(p.name for p in hub.iterdir()) == ["estimates.csv", "heterogeneity.csv", "notes.txt", "summary.json"]


def test_analysis_names_follow_the_one_name_rule(logs, tmp_path, capsys):
    """An analysis name (an --arm's NAME, the --input file's stem) is a name as a site's is: not `all`, no
    surrounding space, not two equal but for case (or Unicode form), no contrast separator."""
    _, per_site, _ = logs
    log = per_site["north"]
    for stem in ("all", " sp"):
        path = tmp_path / stem / f"{stem}.csv"
        path.parent.mkdir()
        shutil.copy(log, path)
        _refused(capsys, _export(path, "north", tmp_path / "e", None, seed=SEED, reps=REPS), "--input")
    nfc, nfd = "\u00e9", "e\u0301"
    for first, second, needle in (
        ("A", "a", "given twice"),
        (nfc, nfd, "--arm"),
        ("x minus y", "b", "--arm"),
    ):
        argv = ["--arm", f"{first}={log}", "--arm", f"{second}={log}"]
        _refused(capsys, _export(None, "north", tmp_path / "e", None, *argv, seed=SEED, reps=REPS), needle)
    assert not (tmp_path / "e").exists()


# ------------------------------------------------------------------ paired contrasts: two arms per site


def _other_arm(rows: list[dict], rng) -> list[dict]:
    """Another mechanism's proposals on the same cases (same cases, clusters and executed actions)."""
    out = []
    for r in rows:
        executed = int(r["executed_action"][1])
        changed = rng.random() < 0.5
        proposed = (executed + int(rng.integers(1, 4))) % 4 if changed else executed
        prop = repr(float(rng.normal(-1.0, 1.2))) if changed else r["utility_executed_local"]
        out.append({**r, "proposed_action": f"a{proposed}", "utility_proposed_local": prop})
    return out


def _read_rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def arms(logs, signed):
    """Arm `b` (another mechanism) beside each site's log (arm `a`), the pooled arms with namespaced ids,
    and each site's signed export of both arms (the contrast `b minus a`)."""
    root, per_site, pooled_a = logs
    keys, _, _ = signed
    rng = np.random.default_rng(11)
    per_site_b, pooled_b, exports = {}, [], {}
    for site, log in per_site.items():
        rows = _other_arm(_read_rows(log), rng)
        per_site_b[site] = _write(root / f"{site}-b" / "log.csv", rows)
        pooled_b += _namespaced(site, rows)
        out = keys / f"arms-{site}"
        key = keys / f"key-{site}" / "site.key"
        argv = ["--arm", f"a={log}", "--arm", f"b={per_site_b[site]}"]
        assert _export(None, site, out, key, *argv, seed=SEED, reps=REPS) == 0
        exports[site] = out
    return per_site_b, _write(root / "all-b" / "log.csv", pooled_b), pooled_a, exports


def test_a_contrast_given_twice_or_of_one_arm_is_refused_at_the_site(logs, arms, tmp_path, capsys):
    """`--contrast "b minus a"` twice would be signed with doubled clusters; "a minus a" is 0 by design."""
    _, per_site, _ = logs
    per_site_b = arms[0]
    argv = ["--arm", f"a={per_site['north']}", "--arm", f"b={per_site_b['north']}"]
    for contrasts, needle in ((["b minus a", "b minus a"], "--contrast: given twice"), (["a minus a"], "itself")):
        extra = [x for c in contrasts for x in ("--contrast", c)]
        _refused(capsys, _export(None, "north", tmp_path / "e", None, *argv, *extra, seed=SEED, reps=REPS), needle)
    assert not (tmp_path / "e").exists()


def _pool_folders(signed, out: Path, folders, extra=()) -> int:
    _, trust, _ = signed
    argv = ["pool", "--trust", trust, "--output-dir", out, *extra]
    for folder in folders:
        argv += ["--export", folder]
    return _run(*argv)


def test_pooled_paired_contrasts_equal_compare(arms, signed, tmp_path, monkeypatch):
    """`compare --scheme poisson_by_site` of both arms of all sites vs the hub's pool of the sites' two-arm
    exports: the contrast's replicate sums and interval ends to the bit, its point to 1e-12; the hub's
    delta-method interval of the difference equals the delta method over all clusters to 1e-12."""
    from autheval.estimation.analytic import delta_interval
    from autheval.records.cluster_stats import register_cluster_stats
    from autheval.sites.pool import read_export
    from autheval.sites.signing import trusted_keys
    from warehouse import sql

    _, pooled_b, pooled_a, exports = arms
    captured = _lake_site_sums(monkeypatch)
    argv = ["compare", "--arm", f"a={pooled_a}", "--arm", f"b={pooled_b}", "--scheme", "poisson_by_site"]
    assert _run(*argv, "--seed", SEED, "--reps", REPS, "--no-progress", "--output-dir", tmp_path / "lake") == 0
    assert _pool_folders(signed, tmp_path / "hub", exports.values()) == 0
    from autheval.estimation.by_site import sum_over_sites

    trusted = trusted_keys(signed[1])
    read = sorted((read_export(f, trusted) for f in exports.values()), key=lambda e: e.site)
    for stream, arm in enumerate(("a", "b")):  # the lake's streams: one per analysis, in name order
        assert np.array_equal(_stacked(captured, stream), sum_over_sites(e.replicates[arm] for e in read))

    lake = {r["unit"]: r for r in _estimates(tmp_path / "lake" / "paired_contrast.csv")}
    hub = _estimates(tmp_path / "hub" / "paired_contrast.csv")
    boot = [r for r in hub if r["source"] == "pooled" and r["interval_method"] == "bootstrap_poisson_by_site"]
    assert [r["unit"] for r in boot] == ["image_weighted", "cluster_equal"]
    for r in boot:
        w = lake[r["unit"]]
        assert r["contrast"] == w["contrast"] == "b minus a" and (r["arm_a"], r["arm_b"]) == ("b", "a")
        for key in ("ci_lower", "ci_upper", "p_value", "p_adjusted", "q_value"):
            assert float(r[key]) == float(w[key]), key
        assert r["family"] == w["family"] and r["excludes_zero"] == w["excludes_zero"]
        assert float(r["difference"]) == pytest.approx(float(w["difference"]), abs=1e-12, rel=1e-12)

    # the delta method of the difference over every cluster, from the lake's per-cluster sums
    con = sql.connect(threads=1)
    both = [read_records(pooled_a, analysis="a"), read_records(pooled_b, analysis="b")]  # held: their files
    register_cluster_stats(con, both)
    per_cluster = con.sql(
        "SELECT a.n, a.sum_gap AS gap_a, b.sum_gap AS gap_b FROM cluster_stats a JOIN cluster_stats b "
        "ON a.cluster_id = b.cluster_id AND a.analysis = 'a' AND b.analysis = 'b' ORDER BY a.cluster_id"
    ).fetchnumpy()
    delta = [r for r in hub if r["source"] == "pooled" and r["interval_method"] == "delta_method"]
    assert [r["unit"] for r in delta] == ["image_weighted", "cluster_equal"]
    n, g = per_cluster["n"], len(per_cluster["n"])
    for r in delta:
        divisor = np.ones(g) if r["unit"] == "image_weighted" else n
        x, d = n / divisor, (per_cluster["gap_b"] - per_cluster["gap_a"]) / divisor
        ratio = d.sum() / x.sum()
        se = math.sqrt(g / (g - 1) * ((d - ratio * x) ** 2).sum()) / x.sum()
        _, lo, hi = delta_interval(ratio, se, g, (0.025, 0.975))
        assert float(r["difference"]) == pytest.approx(ratio, abs=1e-12, rel=1e-12)
        assert float(r["ci_lower"]) == pytest.approx(lo, abs=1e-12, rel=1e-12)
        assert float(r["ci_upper"]) == pytest.approx(hi, abs=1e-12, rel=1e-12)
    assert {r["source"] for r in hub} == {"pooled", *(f"site:{s}" for s in SITES)}


def test_contrast_exports_of_other_mechanisms_or_unpaired_arms_are_refused(logs, signed, arms, tmp_path, capsys):
    root, per_site, _ = logs
    keys, _, _ = signed
    per_site_b, _, _, exports = arms
    # south contrasts another mechanism (c) than north and west (b): nothing pooled
    other = tmp_path / "south-c"
    argv = ["--arm", f"a={per_site['south']}", "--arm", f"c={per_site_b['south']}"]
    assert _export(None, "south", other, keys / "key-south" / "site.key", *argv, seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    code = _pool_folders(signed, tmp_path / "hub", [exports["north"], other, exports["west"]])
    _refused(capsys, code, "every site contrasts the same mechanisms")
    # a single-record export beside two-arm ones
    code = _pool_folders(signed, tmp_path / "hub", [exports["north"], signed[2]["south"]])
    _refused(capsys, code, "paired contrasts")
    # arms that are not on identical clusters: the site refuses, as compare does
    unpaired = ["--arm", f"a={per_site['north']}", "--arm", f"b={per_site_b['south']}"]
    code = _export(None, "north", tmp_path / "x", None, *unpaired, seed=SEED, reps=REPS)
    _refused(capsys, code, "identical clusters")
    code = _export(None, "north", tmp_path / "x", None, *unpaired[:2], "--contrast", "a minus z", reps=REPS)
    _refused(capsys, code, "unknown arm 'z'")
    # a re-signed contrast naming an arm the export does not hold
    north_key = keys / "key-north" / "site.key"
    bad = _resign(exports["north"], tmp_path, "bad-arm", north_key, stats=_set(["contrasts", 0, "arm_b"], "z"))
    _refused(capsys, _pool_folders(signed, tmp_path / "hub", [bad]), "contrasts[0].contrast must be")
    moved = _resign(
        exports["north"],
        tmp_path,
        "bad-moment",
        keys / "key-north" / "site.key",
        stats=lambda s: s["contrasts"][0]["units"]["image_weighted"]["mean"].__setitem__(1, 1e3),
    )
    _refused(capsys, _pool_folders(signed, tmp_path / "hub", [moved]), "contrasts[0].units.image_weighted.mean[1]")
    assert not (tmp_path / "hub").exists() and not (tmp_path / "x").exists()


# ------------------------------------------------------------------ secret seeds and the scheme


def test_secret_seed_exports_pool_as_their_own_scheme(logs, signed, tmp_path, capsys):
    """--secret-seed: the manifest names scheme poisson_by_site_secret and no seed; two exports of the same
    records have the same totals but other replicates; the hub pools them under that scheme with no seed,
    and refuses them beside a hub-seed export or under a declared --seed."""
    root, per_site, _ = logs
    keys, _, exports = signed
    secret = {}
    for site in SITES:
        secret[site] = tmp_path / f"secret-{site}"
        key = keys / f"key-{site}" / "site.key"
        assert _export(per_site[site], site, secret[site], key, "--secret-seed", reps=REPS) == 0
    again = tmp_path / "again-north"
    assert _export(per_site["north"], "north", again, keys / "key-north" / "site.key", "--secret-seed", reps=REPS) == 0
    capsys.readouterr()
    manifest = json.loads((secret["north"] / "manifest.json").read_text())
    assert (manifest["scheme"], manifest["seed"], manifest["site_seed"]) == ("poisson_by_site_secret", None, None)
    first, second = (json.loads((f / "statistics.json").read_text()) for f in (secret["north"], again))
    assert first == second  # totals and moments: the same records, the same numbers
    assert (secret["north"] / "replicates.parquet").read_bytes() != (again / "replicates.parquet").read_bytes()

    assert _pool_folders(signed, tmp_path / "hub", secret.values()) == 0
    rows = [r for r in _estimates(tmp_path / "hub" / "estimates.csv") if r["interval_method"].startswith("bootstrap")]
    assert {(r["scheme"], r["interval_method"], r["seed"]) for r in rows} == {
        ("poisson_by_site_secret", "bootstrap_poisson_by_site_secret", "")
    }
    summary = json.loads((tmp_path / "hub" / "summary.json").read_text())
    assert (summary["scheme"], summary["seed"]) == ("poisson_by_site_secret", None)
    capsys.readouterr()
    _refused(capsys, _pool_folders(signed, tmp_path / "h2", [exports["north"], secret["south"]]), "scheme")
    code = _pool_folders(signed, tmp_path / "h2", secret.values(), extra=("--seed", SEED))
    _refused(capsys, code, "a secret seed")
    # a secret export whose manifest still names a seed, re-signed
    named = _resign(secret["north"], tmp_path, "named", keys / "key-north" / "site.key", manifest=_set(["seed"], SEED))
    _refused(capsys, _pool_folders(signed, tmp_path / "h2", [named]), "seed must be null")
    assert not (tmp_path / "h2").exists()


def test_export_flag_refusals(logs, tmp_path, capsys):
    _, per_site, _ = logs
    log = per_site["west"]
    _refused(capsys, _export(log, "west", tmp_path / "e", None, "--secret-seed", seed=SEED), "--secret-seed")
    _refused(capsys, _export(None, "west", tmp_path / "e", None), "--input")
    _refused(capsys, _export(log, "west", tmp_path / "e", None, "--arm", f"a={log}"), "--input")
    _refused(capsys, _export(log, "west", tmp_path / "e", None, "--contrast", "a minus b"), "--contrast")
    twice = ["--arm", f"a={log}", "--arm", f"a={log}"]
    _refused(capsys, _export(None, "west", tmp_path / "e", None, *twice), "twice")
    assert not (tmp_path / "e").exists()


def test_sites_are_added_in_name_order_not_id_order():
    """Site names 'a', 'a-b', 'a.c': their ids sort a-b:, a.c:, a: (byte order) but the hub adds sites in
    name order, so the scheme's runs come in name order and its sums are the hub's sum of the sites'
    own products in that order (which differs, in the last bits, from the id order's)."""
    import duckdb

    from autheval.estimation.bootstrap import one_blas_thread, poisson_products
    from autheval.estimation.by_site import site_poisson_products, site_runs, site_seed, sum_over_sites

    sizes = {"a-b": 7, "a.c": 5, "a": 9}  # id order
    ids = [f"{site}:{k:02d}" for site, n in sizes.items() for k in range(n)]
    con = duckdb.connect()
    con.execute("CREATE TABLE cluster_stats AS SELECT 'log' AS analysis, i AS cluster_id FROM unnest($1) t(i)", [ids])
    con.execute(
        "CREATE OR REPLACE TABLE cluster_stats AS SELECT analysis, cluster_id, "
        "CAST(row_number() OVER (ORDER BY cluster_id) - 1 AS INTEGER) AS cluster_rank FROM cluster_stats"
    )
    runs = site_runs(con, {})["log"]
    assert runs == [("a", 12, 9), ("a-b", 0, 7), ("a.c", 7, 5)]
    matrix = np.random.default_rng(3).normal(size=(len(ids), 16)) * 1e3
    with one_blas_thread():
        got = site_poisson_products(SEED, runs, 0, 300, matrix)
        parts = {s: poisson_products(site_seed(SEED, s), 0, 300, matrix[f : f + n]) for s, f, n in runs}
    assert np.array_equal(got, sum_over_sites(parts[s] for s in ("a", "a-b", "a.c")))
    assert not np.array_equal(got, sum_over_sites(parts[s] for s in ("a-b", "a.c", "a")))


def test_secret_seed_pooled_interval_covers_at_about_its_level():
    """benchmarks/sites_coverage.py's small case: 3 sites of 20 clusters that disagree (fixed site effects),
    each with a secret seed of its own: the pooled 95% interval of Delta_authority covers the truth in
    both units (figures at full size: docs/sites.md)."""
    from benchmarks.sites_coverage import coverage

    rng = np.random.default_rng(5)
    seeds = np.random.default_rng(6)
    mu = np.array([-0.2, 0.4, 1.0])  # the first site alone would be centred far from the truth
    result = coverage([20, 20, 20], mu, 80, 300, rng, seeds=lambda: int(seeds.integers(0, 2**62)))
    for unit, (covered, se) in result.items():
        assert 0.85 <= covered <= 1.0 and 0 < se < 0.05, (unit, covered, se)


def test_secret_weights_are_poisson_one():
    """The secret scheme's weights (by inversion of 32-bit uniforms): the Poisson(1) probabilities of 0..3,
    mean and variance 1, to within 4 standard errors over 10^6 draws."""
    from autheval.estimation.by_site import secret_weights

    w = secret_weights(np.random.default_rng(9), (1000, 1000))
    for k in range(4):
        p = math.exp(-1) / math.factorial(k)
        assert abs((w == k).mean() - p) < 4 * math.sqrt(p * (1 - p) / w.size), k
    assert abs(w.mean() - 1) < 4e-3 and abs(w.var() - 1) < 6e-3 and w.max() <= 11
