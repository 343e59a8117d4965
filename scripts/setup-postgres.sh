#!/usr/bin/env bash
# Starts the two PostgreSQL servers the tests of the PostgreSQL engine run against, and prints
# the environment that points the tests at them:
#
# - PostgreSQL 16 with pgvector, from the PyPI wheel `pgserver` (installed into .cache/), for the
#   engine as most users run it (dense search through pgvector's HNSW index);
# - Debian's PostgreSQL 15 from /usr/lib/postgresql/15/bin (package postgresql-15, installed with
#   apt-get if missing), which has no pgvector: the exact dense-search path.
#
# Each server is a throw-away cluster under .cache/postgres/<major>/, listening only on a Unix
# socket in its own directory (no TCP port, so several checkouts never collide), with durability
# off (fsync, full-page writes): test data is not worth an fsync. As root the servers run as the
# system user `engram-pg` (created if needed), because PostgreSQL refuses to run as root.
#
# Usage:
#   eval "$(scripts/setup-postgres.sh start)"   # start (or reuse) both; prints `export ...` lines
#   scripts/setup-postgres.sh status            # exit 0 when both are running
#   scripts/setup-postgres.sh stop              # stop both and delete their clusters
#
# Exported for the tests:
#   ENGRAM_TEST_PG_URL     postgres:// URL of the PostgreSQL 16 + pgvector server (database `postgres`)
#   ENGRAM_TEST_PG15_URL   the same for PostgreSQL 15 without pgvector
#   ENGRAM_TEST_PG_BIN     the PostgreSQL 16 bin/ folder (tests that stop and restart a server of
#                          their own start it from here)
#   ENGRAM_TEST_PG15_BIN   the PostgreSQL 15 bin/ folder (built with OpenSSL, unlike the wheel's
#                          16: the TLS test starts its server from here)
#   ENGRAM_TEST_PG_OS_USER the system user servers must run as ("" when not root)
#
# Read: ENGRAM_PG_SHARED_BUFFERS (default 64MB, enough for the tests): a benchmark whose vector
# index is larger gives the servers more, as a real deployment would (stop, then start).
#
# Anything that fails is reported on stderr with the reason and a non-zero exit: the tests never
# skip because PostgreSQL is missing.
set -euo pipefail

pgserver_version="0.1.4"
os_user="engram-pg"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo_root/.cache/postgres"
venv="$cache/pgserver-venv"
stamp="$venv/.engram-pgserver-$pgserver_version"
pg15_bin="/usr/lib/postgresql/15/bin"

die() {
    echo "setup-postgres: $*" >&2
    exit 1
}

# Runs a command as the server's system user when we are root, as ourselves otherwise.
as_server_user() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u "$os_user" -- "$@"
    else
        "$@"
    fi
}

server_user() {
    if [[ "$(id -u)" == 0 ]]; then echo "$os_user"; else echo ""; fi
}

# The pgserver wheel's PostgreSQL 16 (with pgvector), installed into a venv under .cache/.
install_pg16() {
    if [[ ! -f "$stamp" ]]; then
        local python="${PYTHON:-python3}"
        command -v "$python" >/dev/null ||
            die "$python not found; install Python 3 with venv to get PostgreSQL 16 (PyPI wheel pgserver)"
        mkdir -p "$cache"
        local work
        work="$(mktemp -d "$cache/.pgserver.XXXXXX")"
        # The wheel's own Python dependencies are not needed: only its binaries are used.
        if ! { "$python" -m venv "$work/venv" >&2 &&
            "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
                "pgserver==$pgserver_version" >&2; }; then
            rm -rf "$work"
            die "could not install the PyPI wheel pgserver==$pgserver_version (PostgreSQL 16 + pgvector)"
        fi
        touch "$work/venv/.engram-pgserver-$pgserver_version"
        rm -rf "$venv"
        mv "$work/venv" "$venv"
        rmdir "$work"
    fi
    local bin
    bin="$(ls -d "$venv"/lib/python3*/site-packages/pgserver/pginstall/bin 2>/dev/null | head -n 1 || true)"
    [[ -x "$bin/postgres" ]] || die "the pgserver wheel in $venv has no pginstall/bin/postgres"
    [[ -f "$bin/../share/postgresql/extension/vector.control" ]] ||
        die "the pgserver wheel in $venv has no pgvector extension"
    echo "$bin"
}

install_pg15() {
    if [[ ! -x "$pg15_bin/postgres" ]]; then
        [[ "$(id -u)" == 0 ]] || die "$pg15_bin/postgres is missing; install the Debian package postgresql-15"
        # The server package only; its post-install step creates a cluster of its own, which is
        # left stopped (ours live under .cache/).
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 >&2 ||
            die "could not install the Debian package postgresql-15"
        [[ -x "$pg15_bin/postgres" ]] || die "postgresql-15 installed but $pg15_bin/postgres is missing"
    fi
    echo "$pg15_bin"
}

ensure_os_user() {
    [[ "$(id -u)" == 0 ]] || return 0
    if ! id "$os_user" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$os_user" >&2 ||
            die "could not create the system user $os_user to run PostgreSQL (it refuses to run as root)"
    fi
    # The server user must be able to reach its data folder and the binaries under .cache/.
    local dir="$repo_root"
    while [[ "$dir" != "/" ]]; do
        local mode
        mode="$(stat -c %a "$dir")"
        if (((8#$mode & 8#005) != 8#005)); then
            chmod o+rx "$dir" || die "cannot make $dir reachable for $os_user"
        fi
        dir="$(dirname "$dir")"
    done
}

# The socket folder of a cluster: its data folder, unless that path is too long for a Unix
# socket name (107 bytes), then a folder under /tmp named after it.
socket_dir() {
    local data="$1"
    if ((${#data} + 20 < 100)); then
        echo "$data"
    else
        echo "/tmp/engram-pg-$(echo -n "$data" | sha256sum | cut -c1-16)"
    fi
}

url_for() {
    local socket="$1" encoded
    encoded="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$socket")"
    echo "postgresql://postgres@$encoded/postgres"
}

running() {
    local bin="$1" data="$2"
    [[ -f "$data/postmaster.pid" ]] && as_server_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

# Starts the cluster in `data` from `bin`, creating it first if needed.
start_cluster() {
    local bin="$1" data="$2"
    local socket
    socket="$(socket_dir "$data")"
    if running "$bin" "$data"; then
        return 0
    fi
    # A cluster that is not running is thrown away: tests leave databases behind when they fail.
    rm -rf "$data"
    mkdir -p "$data" "$socket"
    if [[ "$(id -u)" == 0 ]]; then
        chown "$os_user" "$data" "$socket"
    fi
    chmod 700 "$data"
    as_server_user "$bin/initdb" --pgdata="$data" --username=postgres --auth=trust \
        --encoding=UTF8 --locale=C --no-sync >"$data.initdb.log" 2>&1 ||
        die "initdb failed for $data: $(tail -n 5 "$data.initdb.log")"
    rm -f "$data.initdb.log"
    cat >>"$data/postgresql.conf" <<EOF
# engram test cluster (scripts/setup-postgres.sh)
listen_addresses = ''
unix_socket_directories = '$socket'
max_connections = 300
shared_buffers = ${ENGRAM_PG_SHARED_BUFFERS:-64MB}
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    as_server_user "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start >/dev/null 2>&1 ||
        die "PostgreSQL in $data did not start: $(tail -n 5 "$data/server.log" 2>/dev/null)"
}

stop_cluster() {
    local bin="$1" data="$2"
    if [[ -d "$data" ]]; then
        if running "$bin" "$data"; then
            as_server_user "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 ||
                echo "setup-postgres: could not stop the server in $data" >&2
        fi
        local socket
        socket="$(socket_dir "$data")"
        rm -rf "$data"
        [[ "$socket" == "$data" ]] || rm -rf "$socket"
    fi
}

command="${1:-start}"
case "$command" in
start)
    ensure_os_user
    pg16="$(install_pg16)"
    pg15="$(install_pg15)"
    start_cluster "$pg16" "$cache/16"
    start_cluster "$pg15" "$cache/15"
    echo "export ENGRAM_TEST_PG_URL='$(url_for "$(socket_dir "$cache/16")")'"
    echo "export ENGRAM_TEST_PG15_URL='$(url_for "$(socket_dir "$cache/15")")'"
    echo "export ENGRAM_TEST_PG_BIN='$pg16'"
    echo "export ENGRAM_TEST_PG15_BIN='$pg15'"
    echo "export ENGRAM_TEST_PG_OS_USER='$(server_user)'"
    ;;
status)
    pg16="$(ls -d "$venv"/lib/python3*/site-packages/pgserver/pginstall/bin 2>/dev/null | head -n 1 || true)"
    [[ -n "$pg16" ]] && running "$pg16" "$cache/16" && running "$pg15_bin" "$cache/15"
    ;;
stop)
    pg16="$(ls -d "$venv"/lib/python3*/site-packages/pgserver/pginstall/bin 2>/dev/null | head -n 1 || true)"
    [[ -z "$pg16" ]] || stop_cluster "$pg16" "$cache/16"
    stop_cluster "$pg15_bin" "$cache/15"
    ;;
*)
    die "unknown command '$command' (expected start, status or stop)"
    ;;
esac
