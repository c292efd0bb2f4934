"""The lake's files without Spark, locally (tests/lakehouse/platform/test_objectstore.py writes
and reads them on a real S3-compatible store)."""

from __future__ import annotations

from pathlib import Path

from lakehouse.state.objects import atomic_write, names, read_text, split


def test_a_local_file_is_written_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "landing" / "iot" / "wave-0.json"
    assert read_text(target) is None  # nothing yet: no error
    assert atomic_write(target, '{"a": 1}\n') == target
    assert atomic_write(str(target), b'{"a": 2}\n') == target  # replaced, from a str path too
    assert read_text(target) == '{"a": 2}\n'
    assert sorted(p.name for p in target.parent.iterdir()) == ["wave-0.json"]


def test_an_s3a_uri_splits_into_bucket_and_key() -> None:
    assert split("s3a://my-bucket/lake/landing/iot/x.json") == ("my-bucket", "lake/landing/iot/x.json")
    assert split("s3a://my-bucket") == ("my-bucket", "")


def test_the_files_of_a_directory_are_named_locally_and_on_the_store(tmp_path: Path, s3a_env) -> None:
    """Files only (no subdirectories), sorted; nothing for a directory that does not exist."""
    for root in (str(tmp_path), s3a_env("objects-test") + f"/{tmp_path.name}"):
        assert names(f"{root}/offsets") == []
        for name in ("2", "10", "1"):
            atomic_write(f"{root}/offsets/{name}", name)
        atomic_write(f"{root}/offsets/nested/3", "3")
        assert names(f"{root}/offsets") == ["1", "10", "2"], root
