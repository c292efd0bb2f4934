# The lakehouse image of docker-compose.yml: every Spark, Airflow and platform service runs it.
# It installs exactly what `make bootstrap` installs: the pinned requirements (locked by
# constraints.txt), this project, and the Delta / Kafka jars from Maven Central.
FROM python:3.11-slim-bookworm

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    LAKEHOUSE_ROOT=/lake \
    LAKEHOUSE_JARS_DIR=/opt/lakehouse/.jars/spark \
    AIRFLOW_HOME=/opt/airflow

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/lakehouse
COPY requirements.txt requirements-dev.txt constraints.txt pyproject.toml ./
RUN pip install -r requirements.txt -c constraints.txt

COPY scripts/ scripts/
COPY include/ include/
COPY jobs/ jobs/
COPY dags/ dags/
RUN pip install --no-deps -e . \
 && python scripts/fetch_jars.py \
 && python -m lakehouse.serving.jvm build \
 && rm -rf /root/.m2

RUN useradd --create-home --uid 50000 lakehouse \
 && mkdir -p /lake /opt/airflow \
 && chown -R lakehouse /lake /opt/airflow /opt/lakehouse
USER lakehouse

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["lakehouse", "--help"]
