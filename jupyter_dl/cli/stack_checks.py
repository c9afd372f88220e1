"""`jupyter-dl doctor`'s TensorFlow, Keras, backend (TensorFlow's collectives, Horovod) and GPU lines, from a child
process that imports them. Horovod is optional: without it zero-code cells run on TensorFlow's collectives, so its
lines are warnings unless no backend is left."""

import json
import os
import subprocess
import sys
from pathlib import Path

from jupyter_dl.cli.checks import FAIL, INFO, OK, WARN, Check, dist_version, pip_command, version_tuple

MIN_TF = (2, 16)
# What backends/tf_ops.py calls in tensorflow.python.ops.collective_ops.
TF_COLLECTIVES = ("all_reduce_v2", "broadcast_send_v2", "broadcast_recv_v2", "all_gather_v2")
TF_BACKEND = "TensorFlow's collectives (tf)"
INSTALL_HOROVOD = "jupyter-dl install-horovod (adds Horovod: for --manual Horovod cells and --backend horovod)"


# Runs in a child process: a Horovod built against another TensorFlow can crash the importer, not just raise.
_PROBE = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
COLLECTIVES = sys.argv[1:]  # the collective_ops functions backends/tf_ops.py calls
out = {}
try:
    import tensorflow as tf
    out["tf"] = tf.__version__
    out["build"] = {k: (v if isinstance(v, (str, bool, int)) else str(v))
                    for k, v in dict(tf.sysconfig.get_build_info()).items()}
    out["gpus"] = []
    for d in tf.config.list_physical_devices("GPU"):
        try:
            name = tf.config.experimental.get_device_details(d).get("device_name", d.name)
        except Exception:
            name = d.name
        out["gpus"].append(name)
except Exception as e:
    out["tf_error"] = f"{type(e).__name__}: {e}"
if "tf" in out:
    try:
        from tensorflow.python.ops import collective_ops
        lacking = [n for n in COLLECTIVES if not hasattr(collective_ops, n)]
        out["tf_collectives"] = not lacking
        if lacking:
            out["tf_collectives_error"] = "collective_ops has no " + ", ".join(lacking)
    except Exception as e:
        out["tf_collectives"] = False
        out["tf_collectives_error"] = f"{type(e).__name__}: {e}"
try:
    import keras
    out["keras"] = keras.__version__
except Exception as e:
    out["keras_error"] = f"{type(e).__name__}: {e}"
try:
    import horovod
    out["hvd"] = horovod.__version__
    import horovod.tensorflow as hvd
    out["hvd_tf"] = True
    out["gloo"] = bool(hvd.gloo_built())
    out["nccl"] = bool(hvd.nccl_built())
    out["mpi"] = bool(hvd.mpi_built())
except ImportError as e:
    out.setdefault("hvd_error", f"{type(e).__name__}: {e}")
except Exception as e:
    out["hvd_error"] = f"{type(e).__name__}: {e}"
sys.stdout.write("\n@@probe@@" + json.dumps(out))
"""


def start_probe():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen(
        [sys.executable, "-c", _PROBE, *TF_COLLECTIVES],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )


def finish_probe(proc, timeout):
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"probe_error": f"importing TensorFlow/Horovod took over {timeout:.0f} s"}
    if "@@probe@@" not in stdout:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"probe_error": f"importing TensorFlow/Horovod crashed (exit {proc.returncode}): {last[:200]}"}
    return json.loads(stdout.rsplit("@@probe@@", 1)[1])


def driver_version():
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for word in text.split():
            if version_tuple(word)[:1] and word.count(".") >= 1 and word[0].isdigit():
                return word
    except OSError:
        pass
    return None


def stack_checks(probe):
    """TensorFlow, Keras, both backends (Horovod with its build flags), GPUs and CUDA, from the child's report."""
    tf_version = probe.get("tf") or dist_version("tensorflow", "tensorflow-cpu", "tf-nightly")
    return (
        tensorflow_checks(probe, tf_version)
        + [tf_collectives_check(probe)]
        + horovod_checks(probe)
        + device_checks(probe, tf_version)
    )


def horovod_works(probe):
    """What `backends.horovod.check_installed()` asks: horovod.tensorflow imports and was built with gloo."""
    return bool(probe.get("hvd_tf") and probe.get("gloo"))


def auto_backend(probe):
    """(the backend `--backend auto` picks here: "horovod", "tf" or None, one line saying so), as
    `backends.resolve` decides for a zero-code cell: Horovod where it works, else TensorFlow's collectives."""
    if horovod_works(probe):
        ops = "gloo and NCCL" if probe.get("nccl") else "gloo"
        return "horovod", f"--backend auto uses Horovod {probe.get('hvd')} (horovod, over {ops})"
    if probe.get("hvd") or dist_version("horovod"):
        why = "Horovod does not work here (its line above)"
    else:
        why = "Horovod is not installed; `jupyter-dl install-horovod` adds it"
    if probe.get("tf_collectives"):
        return "tf", f"--backend auto uses {TF_BACKEND}: {why}"
    if "tf" not in probe:
        return None, "--backend auto has no backend to use: TensorFlow does not import (both backends need it)"
    return None, f"--backend auto has no backend to use: TensorFlow's collectives are unavailable, and {why}"


def tensorflow_checks(probe, tf_version):
    checks = []
    if probe.get("probe_error"):
        checks.append(
            Check(
                "TensorFlow / Horovod import",
                FAIL,
                probe["probe_error"],
                "reinstall Horovod against this TensorFlow: jupyter-dl install-horovod --rebuild",
            )
        )
    if not tf_version:
        checks.append(Check("TensorFlow", FAIL, "not installed", pip_command("tensorflow>=2.16")))
    elif probe.get("tf_error"):
        checks.append(
            Check(
                "TensorFlow",
                FAIL,
                f"{tf_version}, import fails: {probe['tf_error'][:120]}",
                pip_command(f"tensorflow=={tf_version}") + " --force-reinstall",
            )
        )
    elif version_tuple(tf_version) < MIN_TF:
        checks.append(
            Check(
                "TensorFlow", FAIL, tf_version, pip_command("tensorflow>=2.16") + " (then jupyter-dl install-horovod)"
            )
        )
    else:
        checks.append(Check("TensorFlow", OK, tf_version))
    keras_version = probe.get("keras") or dist_version("keras")
    if keras_version:
        checks.append(
            Check(
                "Keras",
                OK if version_tuple(keras_version) >= (3,) else WARN,
                keras_version,
                "" if version_tuple(keras_version) >= (3,) else pip_command("keras>=3"),
            )
        )
    elif tf_version:
        checks.append(Check("Keras", FAIL, "not importable", pip_command("keras>=3")))
    return checks


def tf_collectives_check(probe):
    """The tf backend: TensorFlow's own collective ops, in every TensorFlow wheel (nothing to build)."""
    name = "TensorFlow collectives"
    if probe.get("tf_collectives"):
        return Check(name, OK, "tensorflow.python.ops.collective_ops (--backend tf; nothing to build)")
    if probe.get("probe_error"):
        return Check(name, FAIL, "unknown: the import check did not finish (its line above)")
    if "tf" not in probe:
        return Check(name, FAIL, "unavailable: TensorFlow does not import (its line above)")
    why = (probe.get("tf_collectives_error") or "tensorflow.python.ops.collective_ops does not import")[:140]
    return Check(
        name,
        WARN if horovod_works(probe) else FAIL,
        f"{probe['tf']}: {why}",
        pip_command("tensorflow>=2.16") + " (--backend tf needs TensorFlow's collective ops)",
    )


def horovod_checks(probe):
    """Optional: without a working Horovod, zero-code cells run on TensorFlow's collectives, so what is wrong with
    Horovod is a warning. A FAIL only where TensorFlow imports without its collectives (Horovod is the one backend
    left); without TensorFlow, TensorFlow's line is the problem (Horovod needs it too)."""
    checks = []
    hvd_version = probe.get("hvd") or dist_version("horovod")
    gpus = probe.get("gpus") or []
    fallback = bool(probe.get("tf_collectives"))
    missing = FAIL if "tf" in probe and not fallback else WARN
    meanwhile = ": zero-code cells run on TensorFlow's collectives" if fallback else ""
    if not hvd_version:
        checks.append(Check("Horovod", missing, "not installed" + meanwhile, INSTALL_HOROVOD))
    elif not probe.get("hvd_tf"):
        why = probe.get("hvd_error") or "horovod.tensorflow does not import"
        checks.append(
            Check(
                "Horovod with TensorFlow",
                missing,
                f"{hvd_version}: {why[:140]}" + meanwhile,
                "jupyter-dl install-horovod --rebuild (builds it against this TensorFlow)",
            )
        )
    else:
        checks.append(Check("Horovod with TensorFlow", OK, hvd_version))
        checks.append(
            Check(
                "Horovod gloo",
                OK if probe.get("gloo") else missing,
                "built" if probe.get("gloo") else "not built (jupyter-dl runs Horovod ranks over gloo)" + meanwhile,
                "" if probe.get("gloo") else "jupyter-dl install-horovod --rebuild",
            )
        )
        if probe.get("nccl"):
            checks.append(Check("Horovod NCCL", OK, "built (GPU allreduce)"))
        elif gpus:
            checks.append(
                Check(
                    "Horovod NCCL",
                    WARN,
                    "not built: GPU gradients are averaged over gloo (slower)",
                    "HOROVOD_GPU_OPERATIONS=NCCL jupyter-dl install-horovod --rebuild",
                )
            )
        else:
            checks.append(Check("Horovod NCCL", INFO, "not built (not needed without GPUs)"))
    return checks


def device_checks(probe, tf_version):
    checks = []
    gpus = probe.get("gpus") or []
    build = probe.get("build") or {}
    driver = driver_version()
    if "tf" in probe:
        if gpus:
            checks.append(Check("GPUs (TensorFlow)", OK, f"{len(gpus)}: {', '.join(gpus)}"))
        elif driver:
            checks.append(
                Check(
                    "GPUs (TensorFlow)",
                    WARN,
                    f"none visible, though NVIDIA driver {driver} is loaded",
                    pip_command(f"tensorflow[and-cuda]=={tf_version}"),
                )
            )
        else:
            checks.append(Check("GPUs (TensorFlow)", INFO, "none: ranks run on CPU"))
        cuda = (
            f"TF built with CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
            if build.get("is_cuda_build")
            else "TF built without CUDA"
        )
        checks.append(Check("Driver / CUDA", INFO if not gpus else OK, f"driver {driver or 'none'}; {cuda}"))
    return checks
