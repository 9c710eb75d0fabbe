#!/usr/bin/env bash
# Builds the binaries of the local cluster's real nodes, apart from build.sh's
# control plane so that neither build invalidates the other's cache:
#   kubelet    k8s.io/kubernetes/cmd/kubelet, from the kube/ module's own pins
#   cri-fake   kube/nodecmd/cri-fake: upstream's fake CRI runtime on a socket,
#              recording every CreateContainer (see its main.go)
#   nfd-master sigs.k8s.io/node-feature-discovery (nfd/ module): NodeFeature
#              objects -> node labels, as the chart's bundled NFD does
#   nfd-worker, nfd-gc  the rest of NFD's image (images/build.py packs the three as
#              registry.k8s.io/nfd/node-feature-discovery for the chart's NFD dependency)
# into ${GPUSTACK_NODE_BIN_CACHE:-~/.cache/gpustack-operator/node-bin}/<key>/.
#
#   tests/cluster/build-node.sh            build (no-op when cached); prints the dir
#   tests/cluster/build-node.sh --bin-dir  only print the dir it would use
#
# kubelet needs four go.sum lines the control plane does not (k8s.io/cri-streaming,
# otelrestful). They live in kube/node.sum and the build reads kube/go.mod through
# -modfile (a scratch copy) with go.sum + node.sum beside it, so kube/go.mod and kube/go.sum, and
# with them build.sh's cache key, stay untouched. <key> hashes BUILD_FORMAT, those
# files, kube/nodecmd/** and nfd/go.{mod,sum}.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${GPUSTACK_NODE_BIN_CACHE:-$HOME/.cache/gpustack-operator/node-bin}"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -trimpath -p=${GPUSTACK_BUILD_JOBS:-2}"

BUILD_FORMAT=1

cache_key() {
    (cd "$HERE" && echo "format=$BUILD_FORMAT" && cat kube/go.mod kube/go.sum kube/node.sum nfd/go.mod nfd/go.sum \
        $(find kube/nodecmd -name '*.go' | LC_ALL=C sort)) | sha256sum | cut -c1-16
}

BIN_DIR="$CACHE_ROOT/$(cache_key)"
if [[ "${1:-}" == "--bin-dir" ]]; then
    echo "$BIN_DIR"
    exit 0
fi
if [[ -f "$BIN_DIR/.complete" ]]; then
    echo "$BIN_DIR"
    exit 0
fi

command -v go >/dev/null || { echo "build-node.sh: go is not on PATH" >&2; exit 1; }
mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.lock"
flock 9
if [[ -f "$BIN_DIR/.complete" ]]; then
    echo "$BIN_DIR"
    exit 0
fi

log() { echo "build-node.sh: $*" >&2; }
modver() { (cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2"); }
modtime() { (cd "$HERE/$1" && go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$2"); }

# build <module dir> <stamp> <ldflags> <go build args...>
build() {
    local dir="$1" stamp="$2" ldflags="$3"
    shift 3
    [[ -f "$BIN_DIR/.$stamp.done" ]] && return 0
    log "building $stamp: $*"
    local start=$SECONDS
    (cd "$HERE/$dir" && nice -n "${GPUSTACK_BUILD_NICE:-10}" \
        go build -ldflags="-s -w $ldflags" -o "$BIN_DIR/" "$@")
    log "built $stamp in $((SECONDS - start))s"
    touch "$BIN_DIR/.$stamp.done"
}

TOTAL_START=$SECONDS

# --- kubelet + cri-fake, from the kube/ module's pins ------------------------
MODFILE_DIR="$BIN_DIR/.modfile"
mkdir -p "$MODFILE_DIR"
cp "$HERE/kube/go.mod" "$MODFILE_DIR/node.mod"
LC_ALL=C sort -u "$HERE/kube/go.sum" "$HERE/kube/node.sum" >"$MODFILE_DIR/node.sum"
K8S_VERSION="$(modver kube k8s.io/kubernetes)"
K8S_DATE="$(modtime kube k8s.io/kubernetes)"
k8s_minor="${K8S_VERSION#v}"; k8s_major="${k8s_minor%%.*}"; k8s_minor="${k8s_minor#*.}"; k8s_minor="${k8s_minor%%.*}"
K8S_LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
    K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$K8S_DATE"
done
# cri-fake imports the fakes directly, so Go wants those modules (already in the
# graph at these versions) listed as direct requirements: -mod=mod lets it note
# that in the scratch copy only. Checksums must all come from the committed files.
cp "$MODFILE_DIR/node.sum" "$MODFILE_DIR/node.sum.pinned"
build kube kubelet "$K8S_LDFLAGS" -mod=mod -modfile="$MODFILE_DIR/node.mod" \
    k8s.io/kubernetes/cmd/kubelet ./nodecmd/cri-fake
cmp -s "$MODFILE_DIR/node.sum" "$MODFILE_DIR/node.sum.pinned" || {
    log "the kubelet build needed checksums beyond kube/go.sum + kube/node.sum:"
    diff "$MODFILE_DIR/node.sum.pinned" "$MODFILE_DIR/node.sum" >&2 || true
    log "add them to kube/node.sum"
    exit 1
}

# --- nfd-master, nfd-worker, nfd-gc --------------------------------------------
NFD_VERSION="$(modver nfd sigs.k8s.io/node-feature-discovery)"
build nfd nfd "-X sigs.k8s.io/node-feature-discovery/pkg/version.version=$NFD_VERSION" \
    sigs.k8s.io/node-feature-discovery/cmd/nfd-master sigs.k8s.io/node-feature-discovery/cmd/nfd-worker \
    sigs.k8s.io/node-feature-discovery/cmd/nfd-gc

cat >"$BIN_DIR/versions.env" <<EOF
K8S_VERSION=$K8S_VERSION
NFD_VERSION=$NFD_VERSION
EOF
touch "$BIN_DIR/.complete"
log "node binaries in $BIN_DIR ($((SECONDS - TOTAL_START))s)"
echo "$BIN_DIR"
