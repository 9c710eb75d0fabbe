#!/usr/bin/env bash
# Prints the `replace` block kube/go.mod needs for k8s.io/kubernetes <version>:
# every staging module its go.mod points at ./staging/src/... is mapped to the
# published tag v0.<minor>.<patch> of the same release.
#
#   tests/cluster/gen-replaces.sh v1.36.3
# Then paste it into kube/go.mod, set the require line, and run
# `cd tests/cluster/kube && go mod tidy`.
set -euo pipefail
version="${1:?usage: $0 <k8s.io/kubernetes version, e.g. v1.36.3>}"
staging="v0.${version#v1.}"
gomod="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
echo "replace ("
awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " v}' "$gomod"
echo ")"
