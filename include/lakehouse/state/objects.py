"""The lake's files without Spark: a local path, or an object on ``s3a://`` written with pyarrow's
S3 client under the same S3A settings Spark and delta-rs use (``core.config.delta_rs_options``).

Generators, probes and reference data write here, so the same code lands files in a local lake
and in one on object storage.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core.config import delta_rs_options, settings

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

S3A = "s3a://"


def atomic_write(path: Path | str, text: str | bytes) -> Path | str:
    """Write a whole file that no reader sees half-written: locally a hidden temporary renamed into
    place, on ``s3a://`` one PUT (an object appears whole or not at all)."""
    data = text.encode() if isinstance(text, str) else text
    if str(path).startswith(S3A):
        bucket, key = split(str(path))
        with s3(bucket).open_output_stream(f"{bucket}/{key}") as out:
            out.write(data)
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
        bucket, key = split(str(path))
        try:
            with s3(bucket).open_input_stream(f"{bucket}/{key}") as stream:
                return bytes(stream.read()).decode()
        except FileNotFoundError:
            return None
    return Path(path).read_text() if Path(path).is_file() else None


def split(uri: str) -> tuple[str, str]:
    """``s3a://bucket/key`` as ``(bucket, key)``."""
    bucket, _, key = uri[len(S3A) :].partition("/")
    return bucket, key


@cache
def s3(bucket: str) -> S3FileSystem:
    """pyarrow's S3 client for ``bucket``, configured from this process's S3A settings (credentials
    S3A does not name come from the environment or an instance role, as for delta-rs)."""
    from pyarrow.fs import S3FileSystem

    options = delta_rs_options(settings().spark_settings(), bucket)
    endpoint = options.get("AWS_ENDPOINT_URL")
    return S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"),
        region=options.get("AWS_REGION"),
        endpoint_override=endpoint.split("://", 1)[1] if endpoint else None,
        scheme=endpoint.split("://", 1)[0] if endpoint else "https",
        force_virtual_addressing=options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true",
        allow_bucket_creation=False,
        allow_bucket_deletion=False,
    )
