#!/usr/bin/env bash
# Set up a fresh machine for trident_assets: Java for Spark, PostgreSQL for its store's tests, a virtualenv, the package and its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "setup: $*"; }

need=()
if ! command -v java >/dev/null 2>&1; then need+=(openjdk-17-jre-headless); fi
# PostgreSQL server binaries (initdb, pg_ctl) for the PostgreSQL state store's tests.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then need+=(postgresql); fi
# memcached and Redis (redis-server, redis-cli) for the key-value state's tests.
if ! command -v memcached >/dev/null 2>&1; then need+=(memcached); fi
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then need+=(redis-server); fi
if [ "${TRIDENT_WITH_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then need+=(chromium); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "apt-get install ${need[*]} (Java runs Spark; PostgreSQL, memcached, Redis and chromium serve the tests)"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
  else
    echo "Please install: ${need[*]} (Debian/Ubuntu: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  step "creating the virtualenv .venv ($PY)"
  "$PY" -m venv .venv
fi
step "upgrading pip in .venv"
.venv/bin/python -m pip install -q --upgrade pip
step "installing trident_assets and its dependencies into .venv (editable, with the dev tools:" \
  "PySpark, Dagster, DuckDB, pytest, ruff; about 3 minutes and 1.4 GB the first time)"
.venv/bin/python -m pip install -q -e ".[dev]"
# The class archive Spark's JVMs start from (about twice as fast; ~/.cache/trident_assets).
# Not having one only costs speed, so a failure here does not stop the set-up.
if [ "${TRIDENT_CLASS_CACHE:-}" != off ]; then
  step "building Spark's class archive (trident class-cache: later Spark JVMs start faster)"
  .venv/bin/trident class-cache || echo "note: no class archive built; Spark starts slower" >&2
fi
step "done"
