#!/usr/bin/env bash
# Starts the local e2e control plane on 127.0.0.1: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, Kueue (with its CRDs and webhooks)
# and kwok (fake nodes). Builds the binaries first if they are not cached.
#
#   tests/cluster/up.sh                 # state in $GPUSTACK_CLUSTER_DIR (default .dev/cluster)
#   export KUBECONFIG=.dev/cluster/kubeconfig
#
# Running it on a cluster that is already up is a no-op. A partly running
# cluster is stopped and started again (etcd data is kept).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

START=$SECONDS
log() { echo "up.sh: [$((SECONDS - START))s] $*" >&2; }
die() { echo "up.sh: $*" >&2; exit 1; }

BIN_DIR="$("$CLUSTER_HERE/build.sh" | tail -n1)"
[[ -x "$BIN_DIR/kube-apiserver" ]] || die "build.sh gave no binaries in '$BIN_DIR'"
KUBECTL=("$BIN_DIR/kubectl" --kubeconfig "$STATE_DIR/kubeconfig")
command -v openssl >/dev/null || die "openssl is required"
command -v curl >/dev/null || die "curl is required"

# ---------------------------------------------------------------- readiness
apiserver_ready() {
    [[ -f "$PKI/admin.crt" ]] || return 1
    curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}
component_ready() {
    case "$1" in
    etcd) curl -fsS --max-time 3 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' ;;
    kube-apiserver) apiserver_ready ;;
    kube-controller-manager) curl -fsSk --max-time 3 "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz" >/dev/null 2>&1 ;;
    kube-scheduler) curl -fsSk --max-time 3 "https://127.0.0.1:$SCHEDULER_PORT/healthz" >/dev/null 2>&1 ;;
    kueue) curl -fsS --max-time 3 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null 2>&1 &&
        kueue_webhook_answers ;;
    kwok) curl -fsS --max-time 3 "http://127.0.0.1:$KWOK_PORT/healthz" >/dev/null 2>&1 ;;
    esac
}
# A server-side dry run goes through the apiserver to Kueue's mutating and
# validating webhooks, so it proves the whole webhook path, TLS included.
kueue_webhook_answers() {
    "${KUBECTL[@]}" create --dry-run=server -o name -f - >/dev/null 2>&1 <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: up-sh-webhook-probe
EOF
}

wait_ready() { # wait_ready <component> <timeout seconds>
    local name="$1" deadline=$((SECONDS + $2))
    until component_ready "$name"; do
        if ! pid_of "$name" >/dev/null; then
            local pid state
            pid="$(cat "$PIDS/$name.pid" 2>/dev/null || true)"
            # kill -0 also succeeds on a zombie (a component that died and that up.sh, its parent,
            # has not reaped): only /proc's state tells it from a live one still exec'ing, which
            # is waited for like any component that is not ready yet.
            state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
            if [[ -z "$pid" || -z "$state" || "$state" == Z ]]; then
                local how="gone"
                [[ -n "$pid" ]] && how="$(exit_status "$pid")"
                tail -n 30 "$LOGS/$name.log" >&2 || true
                die "$name exited ($how); see $LOGS/$name.log"
            fi
        fi
        if ((SECONDS > deadline)); then
            tail -n 30 "$LOGS/$name.log" >&2 || true
            die "$name not ready after $2s; see $LOGS/$name.log"
        fi
        sleep 0.5
    done
    log "$name ready"
}

# ---------------------------------------------------------------- no-op check
all_up=1
any_up=0
for c in "${COMPONENTS[@]}"; do
    [[ "$c" == kueue && "${GPUSTACK_CLUSTER_KUEUE:-1}" == 0 ]] && continue
    if pid_of "$c" >/dev/null; then any_up=1; else all_up=0; fi
done
if ((all_up)) && apiserver_ready; then
    log "cluster already running (state $STATE_DIR)"
    echo "$STATE_DIR/kubeconfig"
    exit 0
fi
if ((any_up)); then
    log "cluster partly running; restarting it"
    "$CLUSTER_HERE/down.sh"
fi

# From here on a failure stops whatever this run started (logs are kept).
on_exit() {
    local rc=$?
    if ((rc != 0)); then
        echo "up.sh: start failed; stopping what was started (logs in $LOGS)" >&2
        "$CLUSTER_HERE/down.sh" || true
    fi
}
trap on_exit EXIT

# Fail early and clearly when another process (another cluster, another
# engineer's apiserver...) holds one of our ports.
for port_var in ETCD_PORT ETCD_PEER_PORT APISERVER_PORT CONTROLLER_MANAGER_PORT SCHEDULER_PORT \
    KUEUE_WEBHOOK_PORT KUEUE_HEALTH_PORT KUEUE_METRICS_PORT KWOK_PORT; do
    port="${!port_var}"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "127.0.0.1:$port ($port_var) is already in use by another process; free it or set GPUSTACK_$port_var"
    fi
done

mkdir -p "$PKI" "$LOGS" "$PIDS" "$STATE_DIR/etcd" "$STATE_DIR/kueue"

# ---------------------------------------------------------------- PKI
# Kept across restarts so kubeconfigs handed out earlier stay valid.
gen_cert() { # gen_cert <name> <subject> <extendedKeyUsage> [subjectAltName]
    local name="$1" subj="$2" eku="$3" san="${4:-}"
    [[ -f "$PKI/$name.crt" ]] && return 0
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$eku"
        [[ -n "$san" ]] && echo "subjectAltName=$san"
    } >"$PKI/$name.ext"
    openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
if [[ ! -f "$PKI/ca.crt" ]]; then
    log "generating certificates in $PKI"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=gpustack-e2e-ca" -days 3650 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
        -out "$PKI/ca.crt" 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
gen_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:${SERVICE_CIDR%.*/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
gen_cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
gen_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
gen_cert scheduler "/CN=system:kube-scheduler" clientAuth
# The apiserver's identity towards kubelets (logs, exec, port-forward); kubelets trust the cluster CA.
gen_cert apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" clientAuth
# The aggregator's identity towards extension API servers (Kueue's visibility API, when Kueue runs
# from its chart in containers): they trust the request headers of a client the cluster CA signed.
gen_cert front-proxy-client "/CN=front-proxy-client" clientAuth
gen_cert kueue-webhook "/CN=kueue-webhook" serverAuth "IP:127.0.0.1,DNS:localhost"
# Kueue expects tls.crt/tls.key in its cert dir.
mkdir -p "$STATE_DIR/kueue/certs"
cp "$PKI/kueue-webhook.crt" "$STATE_DIR/kueue/certs/tls.crt"
cp "$PKI/kueue-webhook.key" "$STATE_DIR/kueue/certs/tls.key"

write_kubeconfig() { # write_kubeconfig <file> <cert name> <user>
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpustack-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $3
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: gpustack-e2e
  context:
    cluster: gpustack-e2e
    user: $3
current-context: gpustack-e2e
EOF
    chmod 600 "$1"
}
write_kubeconfig "$STATE_DIR/kubeconfig" admin kubernetes-admin
write_kubeconfig "$STATE_DIR/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
write_kubeconfig "$STATE_DIR/scheduler.kubeconfig" scheduler system:kube-scheduler

# ---------------------------------------------------------------- processes
# Each component runs in its own session/process group (setsid), so down.sh
# can kill the whole group; all output goes to $LOGS/<name>.log.
launch() { # launch <name> <command...>
    local name="$1"
    shift
    echo "=== $(date -u +%FT%TZ) $*" >>"$LOGS/$name.log"
    setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$PIDS/$name.pid"
    # Until the forked subshell has exec'd the component, its command line is up.sh's own and
    # pid_of's guard (a file under the state dir on the command line) would call it gone: on a
    # loaded machine that window is long enough for wait_ready to report a live apiserver as
    # exited. Wait for the exec (or the death) here, so every later check sees the component.
    local deadline=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && ! pid_of "$name" >/dev/null && ((SECONDS < deadline)); do
        sleep 0.05
    done
}

# exit_status <pid>: the status of a launched component that has ended (up.sh is its parent).
exit_status() {
    local rc=0
    wait "$1" 2>/dev/null || rc=$?
    if ((rc > 128)); then echo "killed by signal $((rc - 128))"; else echo "exit status $rc"; fi
}

log "starting etcd on 127.0.0.1:$ETCD_PORT"
launch etcd "$BIN_DIR/etcd" \
    --name=gpustack-e2e \
    --data-dir="$STATE_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="gpustack-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true \
    --quota-backend-bytes=$((2 * 1024 * 1024 * 1024)) \
    --log-level=warn
wait_ready etcd 60

log "starting kube-apiserver on 127.0.0.1:$APISERVER_PORT"
launch kube-apiserver "$BIN_DIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
    --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --enable-aggregator-routing=true \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --requestheader-client-ca-file="$PKI/ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --profiling="${GPUSTACK_CLUSTER_PROFILING:-false}" \
    --v="${GPUSTACK_CLUSTER_VERBOSITY:-1}"
# --endpoint-reconciler-type=none: the "kubernetes" Service would otherwise get
# a loopback endpoint, which Endpoints validation rejects (log noise only).
# --enable-aggregator-routing: a webhook's Service is dialled at its endpoints' addresses (there is no
# kube-proxy for a ClusterIP): the container nodes' Pods are reachable through their veth routes.
# Webhooks: nothing to set; the apiserver dials clientConfig.url targets such as
# https://127.0.0.1:<port>/... directly (proxies are unset above).
wait_ready kube-apiserver 120

# GPUSTACK_NODE_MONITOR_GRACE (e.g. 10m; unset: the default): how long a node may miss its
# heartbeats before it is NotReady and its Pods not Ready. The scale benchmarks set it: kwok's
# nodes miss theirs while the apiserver is saturated, and kwok never sets a Pod Ready again.
# --controllers='*': since 1.3x the cloud controllers (service-lb, node-route,
# cloud-node-lifecycle) live in cloud-controller-manager, so nothing here needs
# a cloud and the default set is what we want.
log "starting kube-controller-manager and kube-scheduler"
launch kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$CONTROLLER_MANAGER_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --controllers='*' \
    ${GPUSTACK_NODE_MONITOR_GRACE:+--node-monitor-grace-period="$GPUSTACK_NODE_MONITOR_GRACE"} \
    --profiling="${GPUSTACK_CLUSTER_PROFILING:-false}" \
    --v="${GPUSTACK_CLUSTER_VERBOSITY:-1}"
launch kube-scheduler "$BIN_DIR/kube-scheduler" \
    --kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false \
    --profiling="${GPUSTACK_CLUSTER_PROFILING:-false}" \
    --v="${GPUSTACK_CLUSTER_VERBOSITY:-1}"

# ---------------------------------------------------------------- Kueue
# GPUSTACK_CLUSTER_KUEUE=0: no Kueue here (a test installs it from the chart's Kueue dependency, in
# containers); recorded in <state>/no-kueue so that harness.is_running does not wait for it.
WITH_KUEUE="${GPUSTACK_CLUSTER_KUEUE:-1}"
if [[ "$WITH_KUEUE" == 0 ]]; then touch "$STATE_DIR/no-kueue"; else rm -f "$STATE_DIR/no-kueue"; fi
KUEUE_URL="https://127.0.0.1:$KUEUE_WEBHOOK_PORT"
if [[ "$WITH_KUEUE" != 0 ]]; then
# CRDs and webhook manifests come from the Kueue module in the Go module cache
# (the module zip ships config/); nothing upstream is copied into this repo.
KUEUE_SRC="$(cd "$CLUSTER_HERE/kueue" && GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/kueue |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
[[ -d "$KUEUE_SRC/config/components/crd/bases" ]] || die "no Kueue CRDs under $KUEUE_SRC"
CA_BUNDLE="$(base64 -w0 "$PKI/ca.crt")"

log "applying Kueue CRDs and webhook configurations"
"${KUBECTL[@]}" create namespace kueue-system --dry-run=client -o yaml | "${KUBECTL[@]}" apply -f - >/dev/null
render() { # YAML -> JSON through kubectl, then rewritten by kueue_manifests.py
    "${KUBECTL[@]}" create --dry-run=client -o json -f "$1" |
        python3 "$CLUSTER_HERE/kueue_manifests.py" "$2" --url "$KUEUE_URL" --ca-bundle "$CA_BUNDLE" \
            --kueue-src "$KUEUE_SRC"
}
render "$KUEUE_SRC/config/components/crd/bases" crds >"$STATE_DIR/kueue/crds.json"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "$STATE_DIR/kueue/crds.json" >/dev/null
"${KUBECTL[@]}" wait --for=condition=Established --timeout=60s -f "$STATE_DIR/kueue/crds.json" >/dev/null
render "$KUEUE_SRC/config/components/webhook/manifests.yaml" webhooks >"$STATE_DIR/kueue/webhooks.json"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "$STATE_DIR/kueue/webhooks.json" >/dev/null

# Kueue runs the configuration the chart renders for this Kueue's version, unchanged but for where it
# listens and its certificates (kueue_manifests.py PLACEMENT): a gate the chart gets wrong fails here.
KUEUE_VERSION="$(sed -n 's/^KUEUE_VERSION=//p' "$BIN_DIR/versions.env")"
mkdir -p "$STATE_DIR/helm-home"
HOME="$STATE_DIR/helm-home" "$BIN_DIR/helm" template gpustack-operator "$REPO_ROOT/charts/gpustack-operator" \
    -n gpustack-system --kube-version 1.36.3 --set "kueue.version=$KUEUE_VERSION" \
    --show-only templates/kueue/manager-config.yaml |
    "${KUBECTL[@]}" create --dry-run=client -o json -f - >"$STATE_DIR/kueue/chart-config.json"
python3 "$CLUSTER_HERE/kueue_manifests.py" config --kueue-src "$KUEUE_SRC" \
    --chart-config "$STATE_DIR/kueue/chart-config.json" \
    --webhook-port "$KUEUE_WEBHOOK_PORT" --health-port "$KUEUE_HEALTH_PORT" \
    --metrics-port "$KUEUE_METRICS_PORT" --cert-dir "$STATE_DIR/kueue/certs" \
    >"$STATE_DIR/kueue/config.yaml"
log "starting kueue (webhooks on $KUEUE_URL)"
# KUEUE_METRICS_CERT_DIR is honoured through build.sh's overlay (upstream
# hard-codes /etc/kueue/metrics/certs when internal cert management is off).
launch kueue env KUEUE_METRICS_CERT_DIR="$STATE_DIR/kueue/certs" "$BIN_DIR/kueue" \
    --config="$STATE_DIR/kueue/config.yaml" \
    --kubeconfig="$STATE_DIR/kubeconfig" \
    --zap-log-level="${GPUSTACK_KUEUE_LOG_LEVEL:-info}"
fi

# ---------------------------------------------------------------- NFD
# NFD's CRDs and nfd-master's configuration. nfd-master itself (it turns NodeFeature objects —
# nfd-worker's, simulated by the harness; the device manager's; the worker's — into node labels, as
# the chart's bundled NFD does) is started by tests/cluster/nodes.py with the first node: it annotates
# the node it runs on at start and exits when there is none. The label namespaces the operator
# publishes into are allowed by its config.
NODE_BIN_DIR="$("$CLUSTER_HERE/build-node.sh" | tail -n1)"
[[ -x "$NODE_BIN_DIR/nfd-master" ]] || die "build-node.sh gave no nfd-master in '$NODE_BIN_DIR'"
NFD_SRC="$(cd "$CLUSTER_HERE/nfd" && GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/node-feature-discovery |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
log "applying NFD CRDs"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "$NFD_SRC/deployment/base/nfd-crds/nfd-api-crds.yaml" >/dev/null
"${KUBECTL[@]}" create namespace node-feature-discovery --dry-run=client -o yaml | "${KUBECTL[@]}" apply -f - >/dev/null
mkdir -p "$STATE_DIR/nfd"
cat >"$STATE_DIR/nfd/nfd-master.conf" <<EOF
extraLabelNs: ["gpustack.ai", "feature.gpustack.ai", "acceleratable.feature.gpustack.ai", "general.feature.gpustack.ai", "topology.gpustack.ai"]
resyncPeriod: 1h
EOF

# ---------------------------------------------------------------- kwok
KWOK_SRC="$(cd "$CLUSTER_HERE/tools" && GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/kwok |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
STAGES="$KWOK_SRC/kustomize/stage"
log "starting kwok (nodes annotated kwok.x-k8s.io/node=fake)"
launch kwok "$BIN_DIR/kwok" \
    --kubeconfig="$STATE_DIR/kubeconfig" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --server-address="127.0.0.1:$KWOK_PORT" \
    --node-lease-duration-seconds=40 \
    --config="$STAGES/node/fast/node-initialize.yaml" \
    --config="$STAGES/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    --config="$STAGES/pod/fast/pod-ready.yaml" \
    --config="$STAGES/pod/fast/pod-complete.yaml" \
    --config="$STAGES/pod/fast/pod-delete.yaml"

wait_ready kube-controller-manager 60
wait_ready kube-scheduler 60
wait_ready kwok 60
[[ "$WITH_KUEUE" == 0 ]] || wait_ready kueue 120
# What a client of this cluster needs (read by harness.py).
cat >"$STATE_DIR/cluster.env" <<EOF
KUBECONFIG=$STATE_DIR/kubeconfig
BIN_DIR=$BIN_DIR
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
KUEUE_WEBHOOK_URL=$KUEUE_URL
ETCD_PORT=$ETCD_PORT
APISERVER_PORT=$APISERVER_PORT
CONTROLLER_MANAGER_PORT=$CONTROLLER_MANAGER_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KUEUE_WEBHOOK_PORT=$KUEUE_WEBHOOK_PORT
KUEUE_HEALTH_PORT=$KUEUE_HEALTH_PORT
KUEUE_METRICS_PORT=$KUEUE_METRICS_PORT
KWOK_PORT=$KWOK_PORT
NFD_PORT=$NFD_PORT
NODE_BIN_DIR=$NODE_BIN_DIR
CA_CERT=$PKI/ca.crt
CA_KEY=$PKI/ca.key
EOF
log "cluster ready: export KUBECONFIG=$STATE_DIR/kubeconfig"
echo "$STATE_DIR/kubeconfig"
