"""An S3-compatible object store on 127.0.0.1 (S3Proxy over a local directory).

S3Proxy is Apache-2.0, one jar from Maven Central; it starts with generated credentials.

It is what the tests put a lake on instead of a mock: the same S3 protocol, signatures and
conditional writes (``If-None-Match: *`` is refused with 412 on an existing key) that Spark's S3A
connector and delta-rs speak to S3. A bucket is a directory of ``<home>/data``.

Usage: ``python -m lakehouse.platform.objectstore up|down [--home DIR] [--bucket NAME]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.config import PROJECT_ROOT, delta_rs_options
from lakehouse.platform.services import free_port

S3PROXY_POM = PROJECT_ROOT / "scripts" / "s3proxy" / "pom.xml"
S3PROXY_JARS = PROJECT_ROOT / ".jars" / "s3proxy"
REGION = "us-east-1"  # S3Proxy takes any; the clients must sign for one


def s3proxy_jar() -> Path:
    """S3Proxy's self-contained jar, fetched from Maven Central on first use (cached in ~/.m2)."""
    found = sorted(S3PROXY_JARS.glob("s3proxy-*-jar-with-dependencies.jar"))
    if not found:
        print("fetching the S3Proxy server jar from Maven Central ...", flush=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(S3PROXY_POM), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={S3PROXY_JARS}"],
            check=True,
        )  # fmt: skip
        found = sorted(S3PROXY_JARS.glob("s3proxy-*-jar-with-dependencies.jar"))
    return found[-1]


def write_config(home: Path, port: int, access_key: str, secret_key: str) -> Path:
    """S3Proxy's configuration (mode 0600: it holds the credentials) serving ``<home>/data`` on
    127.0.0.1:``port``; each directory of ``<home>/data`` is a bucket."""
    (home / "data").mkdir(parents=True, exist_ok=True)
    conf = home / "s3proxy.conf"
    conf.touch(mode=0o600)
    conf.chmod(0o600)
    conf.write_text(
        f"s3proxy.endpoint=http://127.0.0.1:{port}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={access_key}\n"
        f"s3proxy.credential={secret_key}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={home / 'data'}\n"
    )
    return conf


def s3proxy_command(conf: Path) -> list[str]:
    """The server's command line: a small heap, no optimizing JIT (it serves small requests)."""
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-jar", str(s3proxy_jar()), "--properties", str(conf)]  # fmt: skip


def answers(endpoint: str) -> bool:
    """Whether the server answers HTTP (an anonymous request gets 403: it is up)."""
    try:
        urllib.request.urlopen(endpoint + "/", timeout=2)  # our own loopback URL
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def hadoop_conf(bucket: str, endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """S3A settings for ``bucket`` on an S3-compatible server at ``endpoint`` (per bucket: other
    buckets keep theirs)."""
    prefix = f"fs.s3a.bucket.{bucket}."
    return {
        prefix + "endpoint": endpoint,
        prefix + "endpoint.region": REGION,
        prefix + "path.style.access": "true",
        prefix + "connection.ssl.enabled": "false",
        prefix + "access.key": access_key,
        prefix + "secret.key": secret_key,
        prefix + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


@dataclass
class ObjectStore:
    """A running S3Proxy: where it keeps everything (``home``), its port and credentials."""

    home: Path
    port: int
    access_key: str
    secret_key: str
    pid: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, home: Path, port: int | None = None, timeout: float = 60) -> ObjectStore:
        """Start S3Proxy with fresh credentials (written to ``<home>/store.json``, mode 0600) and
        wait until it answers."""
        home.mkdir(parents=True, exist_ok=True)
        (home / "data").mkdir(exist_ok=True)
        port = port or free_port()
        access_key, secret_key = f"lake-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
        conf = write_config(home, port, access_key, secret_key)
        with (home / "s3proxy.log").open("ab") as log:
            process = subprocess.Popen(
                s3proxy_command(conf), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        store = cls(home, port, access_key, secret_key, process.pid)
        (home / "store.json").write_text(json.dumps(store.__dict__, default=str))
        (home / "store.json").chmod(0o600)
        deadline = time.monotonic() + timeout
        while not store.answers():
            if process.poll() is not None or time.monotonic() > deadline:
                store.stop()
                tail = (home / "s3proxy.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(
                    f"S3Proxy did not start on 127.0.0.1:{port} (log {home / 's3proxy.log'}):\n{tail}"
                )
            time.sleep(0.3)
        return store

    @classmethod
    def of(cls, home: Path) -> ObjectStore:
        """The store started in ``home`` (by this or another process)."""
        state = json.loads((home / "store.json").read_text())
        return cls(Path(state["home"]), state["port"], state["access_key"], state["secret_key"], state["pid"])

    def answers(self) -> bool:
        return answers(self.endpoint)

    def stop(self, timeout: float = 20) -> None:
        """Stop S3Proxy (its process group); the data stays in ``<home>/data``."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):  # started by this process: reap it, or it
                os.waitpid(self.pid, os.WNOHANG)  # stays a zombie that "answers" for the timeout
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        os.killpg(self.pid, signal.SIGKILL)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (a directory of the filesystem backend); returns ``s3a://name``."""
        (self.home / "data" / name).mkdir(exist_ok=True)
        return f"s3a://{name}"

    def hadoop_conf(self, bucket: str) -> dict[str, str]:
        """S3A settings for ``bucket`` on this store (per bucket: other buckets keep theirs)."""
        return hadoop_conf(bucket, self.endpoint, self.access_key, self.secret_key)

    def spark_conf(self, bucket: str) -> dict[str, str]:
        """:meth:`hadoop_conf` as Spark settings (``LAKEHOUSE_SPARK_CONF``)."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf(bucket).items()}

    def storage_options(self, bucket: str) -> dict[str, str]:
        """delta-rs's settings for ``bucket`` on this store, derived from :meth:`spark_conf` as the
        platform derives them from ``LAKEHOUSE_SPARK_CONF`` (``core.config.delta_rs_options``)."""
        return delta_rs_options(self.spark_conf(bucket), bucket)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--home", type=Path, default=PROJECT_ROOT / ".platform" / "objectstore")
    parser.add_argument("--bucket", default="lake")
    args = parser.parse_args(argv)
    if args.action == "down":
        if (args.home / "store.json").is_file():
            ObjectStore.of(args.home).stop()
            print(f"stopped the object store of {args.home}")
        return 0
    store = ObjectStore.start(args.home)
    root = store.create_bucket(args.bucket)
    print(
        f"S3-compatible store at {store.endpoint} (credentials in {args.home / 'store.json'}); bucket {root}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
