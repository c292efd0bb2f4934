#!/usr/bin/env bash
# PostgreSQL from Debian's packages, for the native production topology (`make stack-up`):
# Airflow's metadata database. A no-op when initdb is found (on PATH or /usr/lib/postgresql/*/bin);
# needs root or sudo otherwise (CI runs as root on fresh Debian). The stack runs its own cluster
# under .stack/postgres: the package's default cluster service is not used.
set -euo pipefail
if command -v initdb >/dev/null || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install PostgreSQL (Debian: apt-get install postgresql) for the production topology" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  SUDO="sudo"
fi
echo "installing Debian's postgresql (Airflow's metadata database of the stack) ..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/initdb
