#!/usr/bin/env bash
# Start a PostgreSQL server on loopback (Debian's package) and print a URL for Dagster's storage.
# The role may create databases, so that each test campaign gets a database of its own. Idempotent.
set -euo pipefail

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
pg_lsclusters -h | grep -q "^$version main " || pg_createcluster "$version" main >/dev/null
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
pg_lsclusters -h | grep -q "^$version main .* online" || pg_ctlcluster "$version" main start </dev/null >/dev/null 2>&1
until pg_isready -q -h 127.0.0.1 -p "$port"; do sleep 0.5; done

as_postgres() { (cd / && su postgres -c "psql -p $port -tAc \"$1\"") </dev/null; }
[ "$(as_postgres "SELECT 1 FROM pg_roles WHERE rolname = 'eval_pipeline'")" = 1 ] \
  || as_postgres "CREATE ROLE eval_pipeline LOGIN CREATEDB PASSWORD 'eval_pipeline'" >/dev/null
echo "postgresql+psycopg2://eval_pipeline:eval_pipeline@127.0.0.1:$port/postgres"
