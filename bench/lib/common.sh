# Sourced by the bench/ scripts: installs what is missing, builds the release binaries once,
# raises the descriptor limit, and runs Python at low priority (the machine is shared).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"

bench_install() {
    local missing=()
    command -v sysbench >/dev/null || missing+=(sysbench)
    command -v haproxy >/dev/null || missing+=(haproxy)
    command -v mariadbd >/dev/null || missing+=(mariadb-server)
    command -v mariadb >/dev/null || missing+=(mariadb-client)
    command -v python3 >/dev/null || missing+=(python3)
    command -v ss >/dev/null || missing+=(iproute2)
    command -v nft >/dev/null || [[ -x /usr/sbin/nft ]] || missing+=(nftables)
    command -v conntrack >/dev/null || [[ -x /usr/sbin/conntrack ]] || missing+=(conntrack)
    if ((${#missing[@]})); then
        echo "bench: installing ${missing[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null ||
            { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null; }
    fi
}

bench_build() {
    if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
        (cd "$ROOT" && nice cargo build --release -p relay -p server-shim -p mariadb-plugin)
    fi
    local bin="${PERCEPTRON_BIN:-$ROOT/target/release}"
    [[ -x "$bin/relay" && -x "$bin/server-shim" ]] ||
        { echo "bench: release binaries missing" >&2; exit 1; }
}

bench_prepare() {
    bench_install
    bench_build
    ulimit -n "$(ulimit -Hn)"
    mkdir -p "$BENCH_DIR/results"
}
