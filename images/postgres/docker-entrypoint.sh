#!/bin/bash
# Entry point with the official postgres image's conventions:
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER
#   (default postgres), POSTGRES_DB (default: the user), each also as <NAME>_FILE;
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256);
#   *.sh / *.sql / *.sql.gz in /docker-entrypoint-initdb.d run once, after initdb.
# initdb runs only when PGDATA holds no cluster; the server then runs in the
# foreground as the postgres user (exec: it receives the stop signal itself).
set -Eeo pipefail

# file_env VAR [DEFAULT]: VAR from $VAR or from the file named by $VAR_FILE.
file_env() {
    local var="$1" file_var="${1}_FILE" def="${2:-}" val
    if [ "${!var:-}" ] && [ "${!file_var:-}" ]; then
        echo >&2 "error: both $var and $file_var are set (they are exclusive)"
        exit 1
    fi
    val="$def"
    if [ "${!var:-}" ]; then
        val="${!var}"
    elif [ "${!file_var:-}" ]; then
        val="$(< "${!file_var}")"
    fi
    export "$var"="$val"
    unset "$file_var"
}

setup_env() {
    file_env POSTGRES_PASSWORD
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    file_env POSTGRES_INITDB_ARGS
    : "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
    export POSTGRES_HOST_AUTH_METHOD
}

init_cluster() {
    if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
        cat >&2 <<'EOM'
error: Database is uninitialized and superuser password is not specified.
       Set POSTGRES_PASSWORD to a non-empty value for the superuser (or, for tests
       only, POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without one).
EOM
        exit 1
    fi
    echo "initializing a new cluster in $PGDATA"
    # shellcheck disable=SC2086
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --encoding=UTF8 $POSTGRES_INITDB_ARGS
    # initdb's defaults (trust) stay for the local socket; the network needs a password.
    printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >> "$PGDATA/pg_hba.conf"

    # A temporary server on the socket only, for POSTGRES_DB and the init scripts.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    export PGUSER="$POSTGRES_USER" PGPASSWORD="$POSTGRES_PASSWORD"
    local psql=(psql -v ON_ERROR_STOP=1 --no-password --no-psqlrc --dbname postgres)
    if [ "$POSTGRES_DB" != postgres ]; then
        "${psql[@]}" --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    local f
    shopt -s nullglob
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
            *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
            *.sql.gz) echo "running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
            *) echo "ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    unset PGUSER PGPASSWORD
    echo "PostgreSQL init process complete; ready for start up."
}

# `docker run IMAGE -c key=value`: options for postgres.
if [ "${1:0:1}" = - ]; then
    set -- postgres "$@"
fi

if [ "$1" = postgres ]; then
    if [ "$(id -u)" = 0 ]; then
        # Root only to own the data directory (a fresh volume or bind mount), then drop.
        mkdir -p "$PGDATA" /var/run/postgresql
        chown postgres:postgres "$PGDATA" /var/run/postgresql
        chmod 0700 "$PGDATA"
        chmod 3777 /var/run/postgresql
        exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
    fi
    setup_env
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        init_cluster
    else
        echo "PostgreSQL Database directory appears to contain a database; skipping initialization"
    fi
fi

exec "$@"
