#!/bin/bash
# The entrypoint of the local MySQL 9.7 image (scripts/docker_image.sh imports the root scripts/mysql_root.sh
# builds). It honours what the official image's does, so testcontainers' MySqlContainer drives it unchanged:
# MYSQL_ROOT_PASSWORD (or MYSQL_ALLOW_EMPTY_PASSWORD), MYSQL_DATABASE, MYSQL_USER with MYSQL_PASSWORD, arguments
# starting with '-' go to mysqld, and a first start initialises the data directory with a temporary server that
# listens on no port (so "ready for connections" is logged twice, the second time by the server that serves).
set -eo pipefail

if [ "${1:0:1}" = "-" ]; then set -- mysqld "$@"; fi
if [ "$1" != "mysqld" ]; then exec "$@"; fi
shift

say() { echo "$(date -u +%FT%TZ) [Entrypoint]: $*" >&2; }
datadir=/var/lib/mysql
mkdir -p "$datadir" /var/run/mysqld
chown mysql:mysql "$datadir" /var/run/mysqld

if [ ! -d "$datadir/mysql" ]; then
  if [ -z "${MYSQL_ROOT_PASSWORD:-}" ] && [ -z "${MYSQL_ALLOW_EMPTY_PASSWORD:-}" ]; then
    say "the database is uninitialised and no password option is given: set MYSQL_ROOT_PASSWORD or MYSQL_ALLOW_EMPTY_PASSWORD"
    exit 1
  fi
  say "initialising $datadir"
  mysqld --no-defaults --initialize-insecure --user=mysql --datadir="$datadir" "$@"
  socket=/var/run/mysqld/init.sock
  mysqld --no-defaults --user=mysql --datadir="$datadir" --skip-networking --mysqlx=OFF --socket="$socket" "$@" &
  pid=$!
  for _ in $(seq 1 300); do
    mysqladmin --socket="$socket" -uroot ping >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { say "the temporary server exited while starting"; exit 1; }
    sleep 0.2
  done
  client=(mysql --protocol=socket --socket="$socket" -uroot)
  # Named zones (SET time_zone = 'Europe/Berlin') need the zone tables, as in the official image.
  mysql_tzinfo_to_sql /usr/share/zoneinfo 2>/dev/null | "${client[@]}" mysql
  root_password="${MYSQL_ROOT_PASSWORD:-}"
  sql="SET @@SESSION.SQL_LOG_BIN=0;
    ALTER USER 'root'@'localhost' IDENTIFIED BY '${root_password//\'/\'\'}';
    CREATE USER 'root'@'%' IDENTIFIED BY '${root_password//\'/\'\'}';
    GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
  if [ -n "${MYSQL_DATABASE:-}" ]; then sql+="CREATE DATABASE IF NOT EXISTS \`$MYSQL_DATABASE\`;"; fi
  if [ -n "${MYSQL_USER:-}" ] && [ "$MYSQL_USER" != root ]; then
    sql+="CREATE USER '$MYSQL_USER'@'%' IDENTIFIED BY '${MYSQL_PASSWORD//\'/\'\'}';"
    if [ -n "${MYSQL_DATABASE:-}" ]; then sql+="GRANT ALL ON \`$MYSQL_DATABASE\`.* TO '$MYSQL_USER'@'%';"; fi
  fi
  echo "$sql" | "${client[@]}"
  if [ -n "$root_password" ]; then client+=(--password="$root_password"); fi
  "${client[@]}" -e "SHUTDOWN"
  wait "$pid" || true
  say "initialised; starting the server"
fi

exec mysqld --no-defaults --user=mysql --datadir="$datadir" "$@"
