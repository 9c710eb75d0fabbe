#!/usr/bin/env bash
# Create .venv and install the project with its test and bench extras; a no-op when nothing changed.
# Wheels come from PyPI through pip's cache (~/.cache/pip); the Cython extensions are built once per
# source state and kept under ~/.cache/gpustack-operator/ext/, so a fresh clone copies them in.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/prerequisites.sh || exit 1
CACHE=${GPUSTACK_CACHE:-$HOME/.cache/gpustack-operator}
stamp=.venv/.installed
want=$("$PYTHON" scripts/deps_key.py) # what decides the install; not the lint or test sections

# fastpath/*.so in place: from the cache when these sources were built before, else built (both
# cores) and kept. The key covers what the compiled code depends on.
extensions() {
  local key dir
  key=$(
    {
      cat setup.py fastpath/*.py fastpath/*.pxd
      .venv/bin/python -c 'import sys, Cython; print(sys.version, Cython.__version__)'
    } | sha256sum | cut -c1-16
  )
  dir="$CACHE/ext/$key"
  if [ -f "$dir/.complete" ]; then
    cp -p "$dir"/*.so fastpath/
    touch fastpath/*.so # newer than the sources the clone just wrote: build_ext leaves them be
  else
    .venv/bin/python setup.py -q build_ext --inplace -j 2 >/dev/null
    mkdir -p "$dir" && cp -p fastpath/*.so "$dir"/ && touch "$dir/.complete"
  fi
}

if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  extensions
  .venv/bin/python -m nodeplugins.protos.generate
  exit 0
fi
# Every wheel this pyproject.toml resolved to, kept once under ~/.cache: a fresh clone installs from
# there without asking PyPI (a minute of resolving and downloads becomes a local unpack).
wheels="$CACHE/wheels/$want"
# uv (PyPI's `uv`, one static binary kept under ~/.cache) unpacks those wheels into a new .venv in
# about 3 s where pip took 25-30 s (pip also compiles every module's bytecode, which the tests never
# read: they keep theirs under PYTHONPYCACHEPREFIX). pip does the first resolve from PyPI as before.
UV_VERSION=0.13.9
uv="$CACHE/tools/uv-$UV_VERSION/uv"
keep_uv() { # fetch uv once into ~/.cache (not into .venv); quietly nothing when PyPI cannot
  [ -x "$uv" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  if .venv/bin/python -m pip install -q --disable-pip-version-check --target "$tmp" "uv==$UV_VERSION" >/dev/null 2>&1 &&
    [ -x "$tmp/bin/uv" ]; then
    mkdir -p "${uv%/*}" && cp "$tmp/bin/uv" "$uv.tmp" && mv "$uv.tmp" "$uv"
  fi
  rm -rf "$tmp"
  return 0
}
if [ -f "$wheels/.complete" ] && [ -x "$uv" ]; then
  export UV_CACHE_DIR="$CACHE/uv"
  [ -x .venv/bin/python ] || "$uv" venv -q --python "$PYTHON" .venv
  # --link-mode copy: the venv's files are its own, not hard links into uv's cache.
  "$uv" pip install -q --link-mode copy --python .venv/bin/python --no-index --find-links "$wheels" \
    -r "$wheels/requirements.txt"
  GPUSTACK_NO_EXTENSIONS=1 "$uv" pip install -q --link-mode copy --python .venv/bin/python --no-index \
    --no-deps --no-build-isolation -e .
elif [ -f "$wheels/.complete" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --no-index --find-links "$wheels" -r "$wheels/requirements.txt"
  GPUSTACK_NO_EXTENSIONS=1 .venv/bin/python -m pip install -q --no-index --no-deps --no-build-isolation -e .
  keep_uv
else
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip setuptools wheel "cython>=3.1,<3.4"
  GPUSTACK_NO_EXTENSIONS=1 .venv/bin/python -m pip install -q -e '.[test,bench]'
  mkdir -p "$wheels"
  .venv/bin/python -m pip freeze --all --exclude-editable >"$wheels/requirements.txt"
  if .venv/bin/python -m pip wheel -q --no-deps -w "$wheels" -r "$wheels/requirements.txt" >/dev/null 2>&1; then
    touch "$wheels/.complete"
  fi
  keep_uv
fi
extensions
# The node agents' gRPC modules, generated from nodeplugins/protos/**/*.proto (grpcio-tools).
.venv/bin/python -m nodeplugins.protos.generate
echo "$want" >"$stamp"
