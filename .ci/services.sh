#!/usr/bin/env bash
# Make sure PostgreSQL, MariaDB and Redis run on loopback (start any that is down), and
# that the databases the tests use exist. Safe to run again.
set -uo pipefail

wait_for() {  # name, command
  for _ in $(seq 1 30); do
    if eval "$2" >/dev/null 2>&1; then echo "services: $1 is up"; return 0; fi
    sleep 1
  done
  echo "services: $1 did not come up" >&2
  return 1
}

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
fi
wait_for PostgreSQL "pg_isready -q -h 127.0.0.1 -p 5432"
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" 2>/dev/null \
  | grep -q 1 || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" || true

if ! mariadb-admin -uroot -h 127.0.0.1 ping >/dev/null 2>&1; then
  echo "services: starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
wait_for MariaDB "mariadb-admin -uroot -h 127.0.0.1 ping"
mariadb -uroot -h 127.0.0.1 -e "CREATE DATABASE IF NOT EXISTS test" || true

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "services: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for Redis "redis-cli -h 127.0.0.1 -p 6379 ping"
