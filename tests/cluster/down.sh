#!/usr/bin/env bash
# Stops every process tests/cluster/up.sh started for this state dir (each
# component's whole process group), waits for them and verifies none is left.
#
#   tests/cluster/down.sh            # keep state (etcd data, certs, logs)
#   tests/cluster/down.sh --purge    # and delete the state dir
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PURGE=0
for arg in "$@"; do
    case "$arg" in
    --purge) PURGE=1 ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
    esac
done

group_alive() { # any process left in process group $1?
    local pgid="$1" stat rest
    # pgrep -g would do, but /proc needs no procps. The builtin read, not $(cat): a fork per
    # process made each scan cost about a CPU-second beside a loaded e2e lane's 500 processes.
    for stat in /proc/[0-9]*/stat; do
        { read -r rest <"$stat"; } 2>/dev/null || continue
        rest="${rest##*) }" # fields after "(comm) "
        # state ppid pgrp ...; a zombie (Z) only waits for its reaper
        set -- $rest
        [[ "${3:-}" == "$pgid" && "${1:-}" != "Z" ]] && return 0
    done
    return 1
}

# Real nodes first (kubelets, their fake runtimes, device managers, nfd-master: tests/cluster/nodes.py),
# so no kubelet outlives the apiserver it reports to.
if [[ -d "$STATE_DIR/nodes" ]]; then
    PY="$REPO_ROOT/.venv/bin/python"
    [[ -x "$PY" ]] || PY=python3
    (cd "$CLUSTER_HERE" && "$PY" nodes.py stop "$STATE_DIR") || echo "down.sh: stopping the real nodes failed" >&2
fi

# Stop in dependency order so every component can shut down cleanly while
# what it talks to is still up: clients first, then the apiserver, then etcd.
STAGES=("kwok kueue kube-scheduler kube-controller-manager" "kube-apiserver" "etcd")
TIMEOUT="${GPUSTACK_CLUSTER_STOP_TIMEOUT:-20}"
stopped=()
for stage in "${STAGES[@]}"; do
    batch=()
    for name in $stage; do
        pid="$(pid_of "$name")" || { rm -f "$PIDS/$name.pid"; continue; }
        # up.sh started it with setsid, so its pid is its process group id.
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        batch+=("$name:$pid")
    done
    ((${#batch[@]})) || continue
    stopped+=("${batch[@]}")
    deadline=$((SECONDS + TIMEOUT))
    while :; do
        left=()
        for entry in "${batch[@]}"; do
            group_alive "${entry#*:}" && left+=("$entry")
        done
        ((${#left[@]})) || break
        if ((SECONDS > deadline)); then
            for entry in "${left[@]}"; do
                echo "down.sh: ${entry%%:*} did not stop within ${TIMEOUT}s; killing it" >&2
                kill -KILL -- "-${entry#*:}" 2>/dev/null || true
            done
            sleep 1
            break
        fi
        sleep 0.2
    done
done

status=0
for entry in "${stopped[@]}"; do
    if group_alive "${entry#*:}"; then
        echo "down.sh: ${entry%%:*} (process group ${entry#*:}) is still running" >&2
        status=1
    else
        rm -f "$PIDS/${entry%%:*}.pid"
    fi
done
((${#stopped[@]})) && echo "down.sh: stopped ${stopped[*]%%:*}" >&2

if ((PURGE)) && ((status == 0)); then
    # A state dir is what up.sh made. GPUSTACK_CLUSTER_DIR set to an empty expansion ("$PWD/$d"
    # with $d empty) once named the repository itself here, and --purge removed it.
    case "$STATE_DIR" in
    / | "$HOME" | "$REPO_ROOT" | "$REPO_ROOT/.dev")
        echo "down.sh: refusing to purge $STATE_DIR: not a cluster state dir" >&2
        exit 2
        ;;
    esac
    if [[ -e "$STATE_DIR/.git" ]]; then
        echo "down.sh: refusing to purge $STATE_DIR: it holds a .git" >&2
        exit 2
    fi
    rm -rf "$STATE_DIR"
    echo "down.sh: removed $STATE_DIR" >&2
fi
exit "$status"
