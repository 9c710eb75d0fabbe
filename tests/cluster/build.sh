#!/usr/bin/env bash
# Builds every upstream binary the local e2e cluster needs, from Go modules
# (no release downloads are possible here), into a cache directory keyed by
# the pins:   ${GPUSTACK_BIN_CACHE:-~/.cache/gpustack-operator/bin}/<key>/
# <key> is a hash of BUILD_FORMAT below, the go.mod/go.sum files, the
# wrapper sources and this script, so bumping a version or changing a build
# flag builds into a fresh directory and a second run with the cache present
# does nothing. Each module's binaries are cached apart, keyed by its own pins,
# flags and packages (module_key), so only what changed is compiled again.
# Bump BUILD_FORMAT when you change how binaries are built in a way those keys
# do not show (GOFLAGS, the environment).
#
#   tests/cluster/build.sh            build (no-op when cached); prints the dir
#   tests/cluster/build.sh --bin-dir  only print the dir it would use
#
# Modules (each pins exact versions; see tests/cluster/README.md):
#   kube/   k8s.io/kubernetes -> one multi-call binary `kube` with symlinks
#           kube-apiserver, kube-scheduler, kube-controller-manager, kubectl;
#           plus etcd (go.etcd.io/etcd/server/v3 at the version k8s pins)
#   kueue/  sigs.k8s.io/kueue cmd/kueue
#   tools/  sigs.k8s.io/kwok cmd/kwok, helm, csi-sanity
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCRIPT="$HERE/$(basename "${BASH_SOURCE[0]}")"
CACHE_ROOT="${GPUSTACK_BIN_CACHE:-$HOME/.cache/gpustack-operator/bin}"

# All modules need go >= 1.26.0; the machine's go1.26.8 is enough, so no
# GOTOOLCHAIN switch is needed. Never let a go.mod toolchain line fetch one.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -trimpath -p=${GPUSTACK_BUILD_JOBS:-2}"

BUILD_FORMAT=2

cache_key() {
    (cd "$HERE" && echo "format=$BUILD_FORMAT" && cat kube/go.mod kube/go.sum kueue/go.mod kueue/go.sum \
        tools/go.mod tools/go.sum $(find kube/cmd -name '*.go' | LC_ALL=C sort) && cat "$SCRIPT") \
        | sha256sum | cut -c1-16
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

command -v go >/dev/null || { echo "build.sh: go is not on PATH" >&2; exit 1; }
mkdir -p "$BIN_DIR"
# One build at a time per cache dir (pytest sessions and up.sh may race).
exec 9>"$BIN_DIR/.lock"
flock 9
if [[ -f "$BIN_DIR/.complete" ]]; then
    echo "$BIN_DIR"
    exit 0
fi

log() { echo "build.sh: $*" >&2; }
modver() { (cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2"); }
modtime() { (cd "$HERE/$1" && go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$2"); }

# build <module dir> <stamp name> <ldflags> <packages...>
# One `go build` per module so shared packages are compiled once. Each module
# builds into a cache of its own, keyed by that module's pins, flags and
# sources alone ($CACHE_ROOT/modules/<stamp>-<key>/), and BIN_DIR hard-links
# from it: bumping Kueue rebuilds Kueue, not Kubernetes. A rerun after a
# failure skips the modules that already built.
module_key() { # <module dir> <ldflags> <packages...>: what decides the binaries
    local dir="$1"
    shift
    { echo "format=$BUILD_FORMAT"
      printf '%s\n' "$@" | grep -v '^-overlay=' # the overlay's path moves; its content follows go.sum
      cd "$HERE/$dir" && cat go.mod go.sum
      if [[ -d cmd ]]; then find cmd -name '*.go' | LC_ALL=C sort | xargs cat; fi
    } | sha256sum | cut -c1-16
}
build() {
    local dir="$1" stamp="$2" ldflags="$3"
    shift 3
    if [[ -f "$BIN_DIR/.$stamp.done" ]]; then
        return 0
    fi
    local cached
    cached="$CACHE_ROOT/modules/$stamp-$(module_key "$dir" "$ldflags" "$@")"
    mkdir -p "$cached"
    if [[ ! -f "$cached/.done" ]]; then
        log "building $stamp: $*"
        local start=$SECONDS
        (cd "$HERE/$dir" && nice -n "${GPUSTACK_BUILD_NICE:-10}" \
            go build -ldflags="-s -w $ldflags" -o "$cached/" "$@")
        log "built $stamp in $((SECONDS - start))s"
        touch "$cached/.done"
    else
        log "$stamp: cached in $cached"
    fi
    local bin
    for bin in "$cached"/*; do
        ln -f "$bin" "$BIN_DIR/" 2>/dev/null || cp -f "$bin" "$BIN_DIR/"
    done
    touch "$BIN_DIR/.$stamp.done"
}

TOTAL_START=$SECONDS

# --- Kubernetes control plane + kubectl + etcd ------------------------------
K8S_VERSION="$(modver kube k8s.io/kubernetes)"          # e.g. v1.36.3
K8S_DATE="$(modtime kube k8s.io/kubernetes)"
k8s_minor="${K8S_VERSION#v}"; k8s_major="${k8s_minor%%.*}"; k8s_minor="${k8s_minor#*.}"; k8s_minor="${k8s_minor%%.*}"
K8S_LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
    K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$K8S_DATE"
done
build kube kube "$K8S_LDFLAGS" ./cmd/kube ./cmd/etcd
for name in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    ln -sfn kube "$BIN_DIR/$name"
done

# --- Kueue -------------------------------------------------------------------
# With internalCertManagement off (we hand it a 127.0.0.1 cert), Kueue's main
# reads its metrics serving cert from the hard-coded /etc/kueue/metrics/certs
# and exits if it is missing. Rather than writing into /etc, the build uses
# `go build -overlay` to compile upstream's cmd/kueue/main.go (its only file,
# no internal imports) as this module's ./cmd/kueue with that one path made
# overridable by $KUEUE_METRICS_CERT_DIR; everything else is upstream. (Go
# refuses overlays of files inside GOMODCACHE, hence the copy.)
KUEUE_VERSION="$(modver kueue sigs.k8s.io/kueue)"
kueue_overlay() {
    local src main ovl="$BIN_DIR/.overlay"
    src="$(cd "$HERE/kueue" && go mod download -json sigs.k8s.io/kueue | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    main="$src/cmd/kueue/main.go"
    local needle='metricsCertPath := "/etc/kueue/metrics/certs"'
    grep -qF "$needle" "$main" || { log "Kueue's main.go no longer has: $needle; update kueue_overlay"; exit 1; }
    mkdir -p "$ovl"
    sed "s#$needle#metricsCertPath := gpustackMetricsCertDir(\"/etc/kueue/metrics/certs\")#" "$main" >"$ovl/main.go"
    cat >"$ovl/zz_gpustack_overlay.go" <<'GO'
package main

import "os"

// gpustackMetricsCertDir is added by gpustack-operator's tests/cluster/build.sh.
func gpustackMetricsCertDir(def string) string {
	if dir := os.Getenv("KUEUE_METRICS_CERT_DIR"); dir != "" {
		return dir
	}
	return def
}
GO
    [[ "$(cd "$src/cmd/kueue" && ls -- *.go)" == "main.go" ]] || { log "Kueue's cmd/kueue has more Go files than main.go; update kueue_overlay"; exit 1; }
    printf '{"Replace": {"%s": "%s", "%s": "%s"}}\n' \
        "$HERE/kueue/cmd/kueue/main.go" "$ovl/main.go" \
        "$HERE/kueue/cmd/kueue/zz_gpustack_overlay.go" "$ovl/zz_gpustack_overlay.go" >"$ovl/overlay.json"
    echo "$ovl/overlay.json"
}
KUEUE_OVERLAY="$(kueue_overlay)"
build kueue kueue "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION -X sigs.k8s.io/kueue/pkg/version.BuildDate=$(modtime kueue sigs.k8s.io/kueue)" \
    -overlay="$KUEUE_OVERLAY" ./cmd/kueue

# --- kwok, helm, csi-sanity --------------------------------------------------
KWOK_VERSION="$(modver tools sigs.k8s.io/kwok)"
HELM_VERSION="$(modver tools helm.sh/helm/v3)"
# helm as its release Makefile builds it: its version, and the Kubernetes version it assumes offline
# (`helm template` without --kube-version, lint's deprecation check) from the client-go it is built
# with, v0.<minor> -> 1.<minor> (a source build defaults to 1.20, below the chart's kubeVersion).
helm_k8s="$(modver tools k8s.io/client-go)"; helm_k8s="${helm_k8s#v}"
helm_k8s_major=$(( ${helm_k8s%%.*} + 1 )); helm_k8s_minor="${helm_k8s#*.}"; helm_k8s_minor="${helm_k8s_minor%%.*}"
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    HELM_LDFLAGS+=" -X $pkg.k8sVersionMajor=$helm_k8s_major -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done
build tools tools "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v} $HELM_LDFLAGS" \
    sigs.k8s.io/kwok/cmd/kwok helm.sh/helm/v3/cmd/helm github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity

cat >"$BIN_DIR/versions.env" <<EOF
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$(modver kube go.etcd.io/etcd/server/v3)
KUEUE_VERSION=$KUEUE_VERSION
KWOK_VERSION=$KWOK_VERSION
HELM_VERSION=$HELM_VERSION
CSI_TEST_VERSION=$(modver tools github.com/kubernetes-csi/csi-test/v5)
EOF
touch "$BIN_DIR/.complete"
log "all binaries in $BIN_DIR ($((SECONDS - TOTAL_START))s)"
echo "$BIN_DIR"
