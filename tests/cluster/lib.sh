# Shared settings for up.sh / down.sh (sourced, not executed).
# Every value can be overridden from the environment.

CLUSTER_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_HERE/../.." && pwd)"

STATE_DIR="${GPUSTACK_CLUSTER_DIR:-$REPO_ROOT/.dev/cluster}"
mkdir -p "$STATE_DIR"
STATE_DIR="$(cd "$STATE_DIR" && pwd)"

# Fixed loopback ports, one block 27641-27649, below the Linux ephemeral range
# (32768-60999) so an outgoing connection never takes one of them.
ETCD_PORT="${GPUSTACK_ETCD_PORT:-27641}"
ETCD_PEER_PORT="${GPUSTACK_ETCD_PEER_PORT:-27642}"
APISERVER_PORT="${GPUSTACK_APISERVER_PORT:-27643}"
CONTROLLER_MANAGER_PORT="${GPUSTACK_CONTROLLER_MANAGER_PORT:-27644}"
SCHEDULER_PORT="${GPUSTACK_SCHEDULER_PORT:-27645}"
KUEUE_WEBHOOK_PORT="${GPUSTACK_KUEUE_WEBHOOK_PORT:-27646}"
KUEUE_HEALTH_PORT="${GPUSTACK_KUEUE_HEALTH_PORT:-27647}"
KUEUE_METRICS_PORT="${GPUSTACK_KUEUE_METRICS_PORT:-27648}"
KWOK_PORT="${GPUSTACK_KWOK_PORT:-27649}"
NFD_PORT="${GPUSTACK_NFD_PORT:-27651}"
SERVICE_CIDR="${GPUSTACK_SERVICE_CIDR:-10.96.0.0/16}"

# Start order; down.sh stops in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kueue kwok)

PKI="$STATE_DIR/pki"
LOGS="$STATE_DIR/logs"
PIDS="$STATE_DIR/pids"

# Never route loopback traffic (webhook calls, health checks) through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost"

pid_of() { # prints the pid of a component if it is alive
    local f="$PIDS/$1.pid" pid
    [[ -f "$f" ]] || return 1
    pid="$(cat "$f")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    # Guard against a recycled pid: every component's command line names a
    # file under the state dir.
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$STATE_DIR/" || return 1
    echo "$pid"
}
