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

log() { printf '[setup] %s\n' "$*" >&2; }

# chromium: the browser tests drive a real JupyterLab page with Playwright (its own browser download is blocked).
# slurm-wlm and munge: tests/cluster/test_slurm.py runs a real single-node Slurm for the ipyparallel Slurm launcher,
# tests/cluster/test_slurm_nodes.py a multi-node one (slurmctld and slurmds in network namespaces, below).
# openssh-server, openssh-client, iproute2, util-linux: tests/cluster/test_multi_host*.py run sshd and engines inside network
# namespaces (ip netns, unshare). Every package a test needs is here, so a fresh machine skips nothing
# (tests/conftest.py fails a run with any other skip).
apt_deps=(libhighwayhash-dev libfarmhash-dev cmake g++ chromium slurm-wlm munge openssh-server openssh-client iproute2
  util-linux)
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
# Horovod compiled against this TensorFlow (gloo; NCCL too where a driver, CUDA and NCCL are found, or with
# HOROVOD_GPU_OPERATIONS=NCCL), cached in $CACHE/wheels/horovod-<hvd>-tf<tf>-cp<xy>[-nccl]: the package's own
# command (jupyter_dl/cli/install_horovod.py), so pip users get the same recipe. A no-op when Horovod already works.
"$py" -m jupyter_dl install-horovod --horovod-version "$HOROVOD_VERSION" --cache-dir "$CACHE"

# The multi-user tests run a real JupyterHub, whose proxy is configurable-http-proxy (Node, from the npm registry).
# Cached outside the clone like the Horovod wheel.
chp_dir="$CACHE/chp"
if [ ! -x "$chp_dir/node_modules/.bin/configurable-http-proxy" ]; then
  log "installing configurable-http-proxy into $chp_dir"
  mkdir -p "$chp_dir"
  (cd "$chp_dir" && npm install --silent --no-audit --no-fund configurable-http-proxy@4)
fi
log "ready: $VENV"
