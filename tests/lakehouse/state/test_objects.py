"""The lake's files without Spark, locally (tests/lakehouse/platform/test_objectstore.py writes
and reads them on a real S3-compatible store)."""

from __future__ import annotations

from pathlib import Path

from lakehouse.state.objects import atomic_write, read_text, split


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
