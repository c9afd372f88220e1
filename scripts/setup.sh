#!/usr/bin/env bash
# One idempotent setup for a fresh machine: Debian build deps, a virtualenv, TensorFlow, Horovod built from source
# against that TensorFlow (cached outside the clone), and jupyter-dl itself with its test extras.
# Re-running it is cheap: every step checks before it works.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=3

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

PYTHON=${PYTHON:-python3}
VENV=${JUPYTER_DL_VENV:-$here/.venv}
TF_VERSION=${TF_VERSION:-2.21.0}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
CACHE=${JUPYTER_DL_CACHE:-$HOME/.cache/jupyter-dl}
# GPU users: HOROVOD_GPU_OPERATIONS=NCCL (with CUDA + NCCL installed) gets its own cache key below.
GPU_OPS=${HOROVOD_GPU_OPERATIONS:-}

log() { printf '[setup] %s\n' "$*" >&2; }

# chromium: the browser tests drive a real JupyterLab page with Playwright (its own browser download is blocked).
# slurm-wlm and munge: tests/test_slurm.py runs a real single-node Slurm for the ipyparallel Slurm launcher.
apt_deps=(libhighwayhash-dev libfarmhash-dev cmake g++ chromium slurm-wlm munge)
missing=()
for p in "${apt_deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip wheel setuptools
fi
pip=("$VENV/bin/pip" install -q --disable-pip-version-check)
py="$VENV/bin/python"

if ! "$py" -c "import tensorflow as tf, sys; sys.exit(tf.__version__ != '$TF_VERSION')" 2>/dev/null; then
  log "installing tensorflow==$TF_VERSION"
  "${pip[@]}" "tensorflow==$TF_VERSION"
fi

pyver=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
key="horovod-$HOROVOD_VERSION-tf$TF_VERSION-$pyver${GPU_OPS:+-${GPU_OPS,,}}"
wheeldir="$CACHE/wheels/$key"
if ! "$py" -c "import horovod.tensorflow as h; assert h.gloo_built()" 2>/dev/null; then
  if ! ls "$wheeldir"/horovod-*.whl >/dev/null 2>&1; then
    log "building Horovod $HOROVOD_VERSION against TF $TF_VERSION (several minutes; cached in $wheeldir)"
    "${pip[@]}" cloudpickle psutil pyyaml packaging
    shim="$CACHE/include-shim"
    # TF 2.21 moved xla_builder.h; Horovod 0.28.1 still includes the old path.
    mkdir -p "$shim/tensorflow/compiler/xla/client"
    echo '#include "xla/hlo/builder/xla_builder.h"' > "$shim/tensorflow/compiler/xla/client/xla_builder.h"
    tmp=$(mktemp -d)
    # pip's own wheel cache is keyed by the sdist only, so a wheel built for another TF would be reused: bypass it.
    env CPLUS_INCLUDE_PATH="$shim${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}" \
      CMAKE_POLICY_VERSION_MINIMUM=3.5 \
      HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      MAKEFLAGS="-j$(nproc)" \
      ${GPU_OPS:+HOROVOD_GPU_OPERATIONS=$GPU_OPS} \
      PATH="$VENV/bin:$PATH" \
      "$VENV/bin/pip" wheel --no-build-isolation --no-cache-dir --no-deps "horovod==$HOROVOD_VERSION" -w "$tmp"
    mkdir -p "$wheeldir"
    mv "$tmp"/horovod-*.whl "$wheeldir/"
    rm -rf "$tmp"
  fi
  log "installing cached Horovod wheel from $wheeldir"
  "${pip[@]}" --no-deps --force-reinstall "$wheeldir"/horovod-*.whl
  "${pip[@]}" cloudpickle psutil pyyaml packaging
  "$py" -c "import horovod.tensorflow as h; assert h.gloo_built(), 'Horovod built without gloo'"
fi

if ! (cd / && "$py" -c "import jupyter_dl") 2>/dev/null || [ pyproject.toml -nt "$VENV/.jupyter_dl_installed" ]; then
  log "installing jupyter-dl (editable) with test extras"
  # The editable build compiles the labextension with jlpm (from the npm registry); users of the wheel need no npm.
  PATH="$VENV/bin:$PATH" "${pip[@]}" -e ".[test]"
  PATH="$VENV/bin:$PATH" "$VENV/bin/jupyter" labextension develop --overwrite . >/dev/null
  # An editable install does not copy the server config the wheel carries; put it where the wheel would.
  install -D -m 644 jupyter-config/server-config/jupyter_dl.json \
    "$VENV/etc/jupyter/jupyter_server_config.d/jupyter_dl.json"
  touch "$VENV/.jupyter_dl_installed"
fi
# The multi-user tests run a real JupyterHub, whose proxy is configurable-http-proxy (Node, from the npm registry).
# Cached outside the clone like the Horovod wheel.
chp_dir="$CACHE/chp"
if [ ! -x "$chp_dir/node_modules/.bin/configurable-http-proxy" ]; then
  log "installing configurable-http-proxy into $chp_dir"
  mkdir -p "$chp_dir"
  (cd "$chp_dir" && npm install --silent --no-audit --no-fund configurable-http-proxy@4)
fi
log "ready: $VENV"
