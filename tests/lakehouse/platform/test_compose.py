"""docker-compose.yml, checked statically (no Docker engine here): the shape compose accepts,
health checks everywhere, secrets only from the generated .env, admin ports on localhost, and
every service mapped to its native twin in ``lakehouse.platform.stack`` (which the tests run for real)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from lakehouse.platform.stack import SERVICES

REPO = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICE_KEYS = {
    "image", "build", "command", "environment", "ports", "volumes", "depends_on", "healthcheck",
    "restart", "labels", "user", "entrypoint",
}  # fmt: skip
SECRET = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN", re.IGNORECASE)
REQUIRED_VAR = re.compile(r"\$\{(\w+):\?[^}]+\}")
NATIVE = {service.name for service in SERVICES}


def services() -> dict[str, dict]:
    return COMPOSE["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    return {k: str(v) for k, v in env.items()}


def test_top_level_and_service_shape() -> None:
    assert set(COMPOSE) <= {"services", "volumes", "networks"} | {k for k in COMPOSE if k.startswith("x-")}
    for name, service in services().items():
        assert set(service) <= SERVICE_KEYS, f"{name}: unknown keys {set(service) - SERVICE_KEYS}"
        assert "image" in service or "build" in service, f"{name} has no image"
        assert isinstance(service.get("command", []), (list, str)), name
        for target, condition in (service.get("depends_on") or {}).items():
            assert target in services(), f"{name} depends on unknown {target}"
            assert condition["condition"] in {"service_healthy", "service_completed_successfully"}
        for volume in service.get("volumes") or []:
            assert volume.split(":")[0] in COMPOSE["volumes"], f"{name}: undeclared volume {volume}"


def test_every_service_has_a_health_check() -> None:
    for name, service in services().items():
        check = service.get("healthcheck")
        assert check and check["test"][0] in {"CMD", "CMD-SHELL"}, f"{name} has no health check"


def test_the_issue_s_services_are_there() -> None:
    names = set(services())
    airflow = {
        "airflow-init",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    }
    assert (
        airflow
        | {"object-store", "postgres", "kafka", "spark-master", "spark-worker", "thrift-server", "generator"}
        <= names
    )
    executor = {environment(services()[n]).get("AIRFLOW__CORE__EXECUTOR") for n in airflow}
    assert executor == {"LocalExecutor"}
    assert all(
        "postgresql+psycopg2://" in environment(services()[n])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        for n in airflow
    )
    spark = environment(services()["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert '"spark://spark-master"' in spark and "7077" in spark
    for name in ("airflow-scheduler", "thrift-server", "generator"):  # one lake, on the object store
        env = environment(services()[name])
        assert env["LAKEHOUSE_ROOT"] == "s3a://lake/lake", name
        s3a = json.loads(env["LAKEHOUSE_SPARK_CONF"])
        assert s3a["spark.hadoop.fs.s3a.bucket.lake.endpoint"] == "http://object-store:9000", name
        assert (
            s3a["spark.hadoop.fs.s3a.bucket.lake.secret.key"]
            == "${S3_SECRET_KEY:?run scripts/compose_env.sh}"
        )


def test_each_service_maps_to_its_native_twin() -> None:
    twins = {
        name: (service.get("labels") or {}).get("lakehouse.native-twin")
        for name, service in services().items()
    }
    unmapped = {name for name, twin in twins.items() if twin not in NATIVE}
    assert not unmapped, f"services without a native twin in lakehouse.platform.stack.SERVICES: {unmapped}"
    assert set(twins.values()) == NATIVE, (
        f"native services missing from compose: {NATIVE - set(twins.values())}"
    )


def test_no_default_secrets_and_admin_ports_on_localhost() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    for name, service in services().items():
        for key, value in environment(service).items():
            if SECRET.search(key) and not key.endswith(("_FILE", "_USERS")):
                assert REQUIRED_VAR.fullmatch(value), f"{name}: {key} must come from .env, not {value!r}"
        for port in service.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"
    assert ":-" not in "".join(m for m in re.findall(r"\$\{\w*(?:PASSWORD|SECRET|KEY)\w*[^}]*\}", text))


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_compose_env_generates_every_required_secret(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    subprocess.run(["bash", str(REPO / "scripts" / "compose_env.sh"), str(env_file)], check=True)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if line and line[0] != "#")
    required = set(REQUIRED_VAR.findall((REPO / "docker-compose.yml").read_text()))
    assert required <= set(values), f"not generated: {required - set(values)}"
    assert all(len(values[name]) >= 24 for name in required if SECRET.search(name) or "KEY" in name)
    before = env_file.read_text()
    subprocess.run(["bash", str(REPO / "scripts" / "compose_env.sh"), str(env_file)], check=True)
    assert env_file.read_text() == before, "an existing .env is kept"
    other = tmp_path / "other.env"
    subprocess.run(["bash", str(REPO / "scripts" / "compose_env.sh"), str(other)], check=True)
    assert other.read_text().splitlines()[2] != before.splitlines()[2], "secrets are random"


def test_dockerfile_installs_the_pinned_stack() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "pip install -r requirements.txt -c constraints.txt" in dockerfile
    assert "scripts/fetch_jars.py" in dockerfile and "openjdk-17" in dockerfile
    assert re.search(r"^FROM python:3\.11", dockerfile, re.MULTILINE)


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable substitution: ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``, ``$$``."""

    def value(match: re.Match[str]) -> str:
        name, operator, rest = match[1], match[2], match[3]
        if name in env and env[name] != "":
            return env[name]
        assert operator != ":?", f"${{{name}}} is required ({rest}) and .env does not set it"
        return rest if operator == ":-" else ""

    text = re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", value, text.replace("$$", "\0"))
    return text.replace("\0", "$")


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_the_compose_specification_schema_accepts_it_with_the_generated_env(tmp_path: Path) -> None:
    """What ``docker compose config`` checks first, without Docker: the file, with the variables
    of a freshly generated .env, against the Compose Specification's JSON schema (fetched at
    bootstrap by scripts/fetch_compose_schema.py)."""
    import json

    import jsonschema

    subprocess.run(["bash", str(REPO / "scripts" / "compose_env.sh"), str(tmp_path / ".env")], check=True)
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / ".env").read_text().splitlines()
        if "=" in line and line[0] != "#"
    )
    document = yaml.safe_load(interpolate((REPO / "docker-compose.yml").read_text(), env))
    schema = json.loads((REPO / ".jars" / "compose_spec.json").read_text())
    jsonschema.validate(document, schema, cls=jsonschema.Draft7Validator)
    with pytest.raises(jsonschema.ValidationError):  # the schema does reject a wrong shape
        jsonschema.validate({"services": {"x": {"healthcheck": {"interval": 5}}}}, schema)
