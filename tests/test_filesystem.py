"""Lake paths as URIs (warehouse/filesystem.py): a local path and a file:// URI take the same code path
through pyarrow's filesystems, with the same tables, the same atomic replacement and the same listing."""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from warehouse import filesystem
from warehouse.catalog import publish_catalog, query
from warehouse.lake import Lake


@pytest.fixture(params=["path", "uri"])
def lake_root(request, tmp_path):
    """The same folder, named as a local path or as a file:// URI."""
    root = tmp_path / "lake"
    return root, (str(root) if request.param == "path" else root.as_uri())


def table(n: int = 3) -> pa.Table:
    return pa.table({"x": list(range(n)), "name": [f"r{i}" for i in range(n)]})


def test_a_path_and_a_file_uri_resolve_to_the_same_location(tmp_path):
    by_path = filesystem.lake_location(tmp_path / "lake")
    by_uri = filesystem.lake_location((tmp_path / "lake").as_uri())
    relative = filesystem.lake_location(os.path.relpath(tmp_path / "lake"))
    for location in (by_path, by_uri, relative):
        assert isinstance(location.filesystem, pafs.LocalFileSystem) and location.is_local
        assert location.root == str((tmp_path / "lake").resolve())
        assert location.uri("t.parquet") == (tmp_path / "lake" / "t.parquet").resolve().as_uri()
    assert Lake(tmp_path / "lake").root == Lake((tmp_path / "lake").as_uri()).root == (tmp_path / "lake").resolve()


def test_an_object_store_uri_keeps_its_scheme():
    location = filesystem.LakeLocation(pafs.LocalFileSystem(), "bucket/lake", "s3")  # no credentials needed
    assert location.uri("estimates.parquet") == "s3://bucket/lake/estimates.parquet"
    assert not location.is_local


def test_an_object_store_lake_has_no_catalog_to_query(tmp_path, monkeypatch):
    """The catalog is a local file: a lake on an object store has none, said in one line (it was an
    AttributeError of its PurePosixPath root)."""
    monkeypatch.chdir(tmp_path)
    lake = Lake(tmp_path / "unused")
    lake.location = filesystem.LakeLocation(pafs.LocalFileSystem(), "bucket/lake", "s3")  # no credentials needed
    lake.root = lake.location.local_root()
    with pytest.raises(FileNotFoundError, match="no catalog at bucket/lake/autheval.duckdb"):
        query(lake, "select 1")


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_write_read_list_through_either_name(lake_root):
    folder, root = lake_root
    lake = Lake(root)
    path = lake.write("estimates", table(), metadata={"scheme": "reference"})
    assert path.parent.parent == folder.resolve() / "runs" and path.name.startswith("estimates.") and path.is_file()
    first = lake.write_partition("landed_records", "abc123", table(2))
    second = lake.write_partition("landed_records", "def456", table(1))
    assert lake.read("estimates").equals(table().replace_schema_metadata({b"scheme": b"reference"}))
    assert lake.read("landed_records").num_rows == 3
    assert lake.tables() == {"estimates": str(path), "landed_records": [str(first), str(second)]}
    assert lake.has_partition("landed_records", "abc123") and not lake.has_partition("landed_records", "zzz")
    # the other name of the same folder sees the same lake
    other = Lake(folder.resolve().as_uri() if root == str(folder) else folder)
    assert other.tables() == lake.tables() and other.read("estimates").num_rows == 3
    with pytest.raises(FileNotFoundError):
        lake.read("contrasts")


def test_replace_is_atomic_and_leaves_no_temporary_file(lake_root):
    folder, root = lake_root
    lake = Lake(root)
    first = lake.write("t", table(3))
    second = lake.write("t", table(5))
    assert lake.read("t").num_rows == 5 and first != second and first.is_file()  # snapshot 1 still names it
    assert not [f for f in files_under(folder) if f.endswith(".tmp")]
    assert stat.S_IMODE(second.stat().st_mode) == 0o444  # a committed file is never rewritten
    assert Lake(root, snapshot=1).read("t").num_rows == 3


def test_a_failed_write_keeps_the_old_table(lake_root, monkeypatch):
    folder, root = lake_root
    lake = Lake(root)
    lake.write("t", table(3))
    before = files_under(folder)

    real_write = filesystem.pq.write_table

    def write_then_fail(data, where, **kwargs):  # the temporary file is there, then the disk fills
        real_write(data, where, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(filesystem.pq, "write_table", write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        lake.write("t", table(7))
    monkeypatch.undo()
    assert lake.read("t").num_rows == 3 and lake.snapshot().snapshot == 1
    assert files_under(folder) == before  # the temporary file and the run's folder are gone


def test_a_pre_snapshot_lake_is_read_as_snapshot_zero(lake_root):
    """Tables at <root>/<table>.parquet (no CURRENT): read as they are; hidden, oddly named and unmarked
    entries are not tables; the first commit carries the old tables over."""
    import pyarrow.parquet as pq

    folder, root = lake_root
    folder.mkdir(parents=True)
    pq.write_table(table(), folder / "t.parquet")
    (folder / "landing").mkdir()
    (folder / "landing" / "x.parquet").write_bytes(b"")  # a folder without the marker: not a table
    (folder / ".hidden.parquet").write_bytes(b"")
    (folder / "Bad-Name.parquet").write_bytes(b"")
    (folder / "empty_partitions").mkdir()
    (folder / "empty_partitions" / ".partitioned_table").write_bytes(b"")
    lake = Lake(root)
    assert set(lake.tables()) == {"t"} and lake.snapshot().snapshot == 0
    lake.write("u", table(1))
    assert set(lake.tables()) == {"t", "u"} and lake.read("t").num_rows == 3 and lake.snapshot().snapshot == 1


def test_the_catalog_reads_a_lake_named_by_uri(tmp_path):
    lake = Lake((tmp_path / "lake").as_uri())
    lake.write("estimates", table())
    publish_catalog(lake)
    assert query(lake, "select count(*) as n from estimates").to_pylist() == [{"n": 3}]
