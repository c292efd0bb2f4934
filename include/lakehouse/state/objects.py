"""The lake's files without Spark: a local path, or an object on ``s3a://`` written with obstore
(the Python binding of the Rust ``object_store`` crate that delta-rs uses) under the same S3A
settings Spark and delta-rs use (``core.config.delta_rs_options``).

Generators, probes, reference data and the control plane (``lakehouse.state.records``) write
here, so the same code works on a local lake and on one on object storage.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core.config import delta_rs_options, settings

if TYPE_CHECKING:
    from obstore.store import S3Store

S3A = "s3a://"


def atomic_write(path: Path | str, text: str | bytes) -> Path | str:
    """Write a whole file that no reader sees half-written: locally a hidden temporary renamed into
    place, on ``s3a://`` one PUT (an object appears whole or not at all)."""
    data = text.encode() if isinstance(text, str) else text
    if str(path).startswith(S3A):
        import obstore

        bucket, key = split(str(path))
        obstore.put(s3(bucket), key, data)
        return str(path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def read_text(path: Path | str) -> str | None:
    """The text of a file (a local path or ``s3a://``); ``None`` when there is none."""
    if str(path).startswith(S3A):
        import obstore
        from obstore.exceptions import NotFoundError

        bucket, key = split(str(path))
        try:
            return bytes(obstore.get(s3(bucket), key).bytes()).decode()
        except (NotFoundError, FileNotFoundError):
            return None
    return Path(path).read_text() if Path(path).is_file() else None


def names(directory: Path | str) -> list[str]:
    """The names of the files directly in a directory (a local path or an ``s3a://`` prefix),
    sorted; empty when there is none."""
    if str(directory).startswith(S3A):
        import obstore

        bucket, prefix = split(str(directory).rstrip("/"))
        listed = obstore.list_with_delimiter(s3(bucket), f"{prefix}/" if prefix else None)
        return sorted(meta["path"].rsplit("/", 1)[-1] for meta in listed["objects"])
    try:
        return sorted(entry.name for entry in os.scandir(directory) if entry.is_file())
    except FileNotFoundError:
        return []


def split(uri: str) -> tuple[str, str]:
    """``s3a://bucket/key`` as ``(bucket, key)``."""
    bucket, _, key = uri[len(S3A) :].partition("/")
    return bucket, key


@cache
def s3(bucket: str) -> S3Store:
    """The S3 client of ``bucket``, configured from this process's S3A settings (credentials S3A
    does not name come from the environment or an instance role, as for delta-rs). Conditional
    writes (``If-None-Match``, ``If-Match``) are what ``lakehouse.state.records`` builds on."""
    from obstore.store import S3Store

    options = delta_rs_options(settings().spark_settings(), bucket)
    config = {key.lower(): value for key, value in options.items()}
    return S3Store(bucket, config=config)  # type: ignore[arg-type]  # keys checked by obstore
