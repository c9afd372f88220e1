"""`jupyter-dl install-horovod`, for real but without a 9-minute compile: its plan (cache key in setup.sh's layout,
the recipe's environment and pip flags), the prerequisite check with PATH lacking cmake, a build that pip refuses
(progress, log path, nothing installed), the no-op re-run setup.sh makes, and installing the cached wheel into an
environment without Horovod. The full build runs in CI's fresh machine through scripts/setup.sh."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_doctor import venv_without_horovod  # noqa: F401  (the shared fixture)

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("JUPYTER_DL_CACHE") or Path.home() / ".cache" / "jupyter-dl")
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
SUDO = "" if os.geteuid() == 0 else "sudo "


def _install(*args, python=sys.executable, env=None, timeout=300):
    start = time.monotonic()
    out = subprocess.run(
        [str(python), "-m", "jupyter_dl", "install-horovod", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or dict(os.environ),
    )
    return out.returncode, out.stdout, out.stderr, time.monotonic() - start


def _tf_version():
    import importlib.metadata

    return importlib.metadata.version("tensorflow")


def _bin_without_cmake(tmp_path):
    """A PATH with the tools this machine has, minus cmake."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("apt-get", "g++", "c++", "nvcc", "conda"):
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    return str(folder)


def test_dry_run_prints_setup_sh_recipe_and_cache_key():
    code, out, err, _ = _install("--dry-run", "--gpu-operations", "none")
    assert code == 0, out + err
    key = f"horovod-0.28.1-tf{_tf_version()}-{PY}"
    assert f"cache key: {key}\n" in out
    command = next(line for line in out.splitlines() if "pip wheel" in line)
    for part in (
        "CMAKE_POLICY_VERSION_MINIMUM=3.5",
        "HOROVOD_WITH_TENSORFLOW=1",
        "HOROVOD_WITH_GLOO=1",
        "HOROVOD_WITHOUT_MPI=1",
        "HOROVOD_WITHOUT_PYTORCH=1",
        "HOROVOD_WITHOUT_MXNET=1",
        "--no-build-isolation --no-cache-dir --no-deps horovod==0.28.1",
    ):
        assert part in command
    assert "HOROVOD_GPU_OPERATIONS" not in command
    # TF 2.21 moved xla_builder.h: the forwarding header goes on CPLUS_INCLUDE_PATH.
    assert f"CPLUS_INCLUDE_PATH={CACHE / 'include-shim'}" in command
    cached = sorted((CACHE / "wheels" / key).glob("horovod-*.whl"))
    if cached:
        assert f"cached wheel: {cached[-1]}" in out
    assert "would: nothing to do: Horovod works here" in out


def test_nccl_plan_has_its_own_key_and_says_what_is_missing():
    code, out, err, _ = _install("--dry-run", "--rebuild", "--gpu-operations", "NCCL", "--cache-dir", "/nonexistent")
    assert f"cache key: horovod-0.28.1-tf{_tf_version()}-{PY}-nccl" in out
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in next(line for line in out.splitlines() if "pip wheel" in line)
    nccl = next(line for line in out.splitlines() if line.strip().startswith("NCCL "))
    if "MISSING" in nccl:  # this machine: CUDA toolkit without NCCL
        assert code == 2 and "libnccl-dev" in out
    else:
        assert code == 0


def test_missing_cmake_is_reported_with_the_exact_command(venv_without_horovod, tmp_path):  # noqa: F811
    env = dict(venv_without_horovod.env, PATH=f"{venv_without_horovod.python.parent}:{_bin_without_cmake(tmp_path)}")
    code, out, err, _ = _install(
        "--dry-run", "--cache-dir", str(tmp_path / "cache"), python=venv_without_horovod.python, env=env
    )
    assert code == 2, out + err
    assert "cmake                MISSING  not on PATH" in out
    fix = f"{SUDO}apt-get install -y cmake" if shutil.which("apt-get") else "install cmake"
    assert fix in out
    # Not a dry run: it stops before building (a bogus version makes pip fail fast if it ever got that far).
    code, out, err, _ = _install(
        "--cache-dir",
        str(tmp_path / "cache"),
        "--horovod-version",
        "0.0.1",
        python=venv_without_horovod.python,
        env=env,
        timeout=120,
    )
    assert code == 2, out + err
    assert "missing cmake: not on PATH" in err and fix in err and "building" not in err


def test_failed_build_shows_the_log_path_and_installs_nothing(tmp_path):
    code, out, err, seconds = _install(
        "--rebuild", "--gpu-operations", "none", "--horovod-version", "0.0.1", "--cache-dir", str(tmp_path), timeout=240
    )
    assert code == 1, out + err
    logs = list((tmp_path / "logs").glob(f"horovod-0.0.1-tf{_tf_version()}-{PY}-*.log"))
    assert len(logs) == 1 and f"full log: {logs[0]}" in err
    assert "horovod==0.0.1" in logs[0].read_text()
    assert not (tmp_path / "wheels").exists()
    assert (
        tmp_path / "include-shim" / "tensorflow/compiler/xla/client/xla_builder.h"
    ).read_text() == '#include "xla/hlo/builder/xla_builder.h"\n'
    # The Horovod installed here is untouched.
    check = subprocess.run(
        [sys.executable, "-c", "import horovod; print(horovod.__version__)"], capture_output=True, text=True
    )
    assert check.stdout.strip() == "0.28.1"


def test_rerun_as_setup_sh_calls_it_is_a_no_op():
    code, out, err, seconds = _install("--horovod-version", "0.28.1", "--cache-dir", str(CACHE))
    print(f"no-op re-run took {seconds:.1f} s")
    assert code == 0 and "already works here" in err, out + err
    assert (
        'jupyter_dl install-horovod --horovod-version "$HOROVOD_VERSION" --cache-dir "$CACHE"'
        in (ROOT / "scripts" / "setup.sh").read_text()
    )


def test_bad_gpu_operations_is_one_line():
    code, out, err, _ = _install("--gpu-operations", "cuda", "--dry-run")
    assert code != 0 and "gpu_operations must be auto, NCCL or none" in err
    assert "Traceback" not in err
    # A typo must not run the default (a build).
    code, out, err, _ = _install("--dry-rn")
    assert code == 2 and "unrecognized arguments: --dry-rn" in err
    code, out, err, _ = _install("--bogus", "1", "--dry-run")
    assert code == 2 and "unknown option --bogus" in err and "would:" not in out


def test_installs_from_the_cache_into_an_environment_without_horovod(venv_without_horovod, tmp_path):  # noqa: F811
    key = f"horovod-0.28.1-tf{_tf_version()}-{PY}"
    cached = sorted((CACHE / "wheels" / key).glob("horovod-*.whl"))
    if not cached:
        pytest.skip(f"no cached Horovod wheel in {CACHE / 'wheels' / key} (scripts/setup.sh builds it)")
    # A copy of the cache (the real wheel, in setup.sh's layout), so the user's cache is only read.
    (tmp_path / "wheels" / key).mkdir(parents=True)
    shutil.copy(cached[-1], tmp_path / "wheels" / key)
    code, out, err, seconds = _install(
        "--cache-dir",
        str(tmp_path),
        "--gpu-operations",
        "none",
        python=venv_without_horovod.python,
        env=venv_without_horovod.env,
    )
    print(f"install from cache took {seconds:.1f} s")
    assert code == 0, out + err
    assert f"using cached wheel {tmp_path / 'wheels' / key / cached[-1].name}" in err
    check = subprocess.run(
        [
            str(venv_without_horovod.python),
            "-c",
            "import horovod, horovod.tensorflow as h; print(horovod.__file__, h.gloo_built())",
        ],
        capture_output=True,
        text=True,
        env=venv_without_horovod.env,
        cwd="/",
    )
    location, gloo = check.stdout.split()[-2:]
    assert location.startswith(str(venv_without_horovod.root)) and gloo == "True", check.stderr
    # Run again: now a no-op.
    code, _, err, _ = _install(
        "--cache-dir",
        str(tmp_path),
        "--gpu-operations",
        "none",
        python=venv_without_horovod.python,
        env=venv_without_horovod.env,
    )
    assert code == 0 and "already works here" in err
