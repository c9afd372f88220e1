"""`jupyter-dl install-horovod`: Horovod compiled against the TensorFlow installed here, gloo always, NCCL when CUDA
and NCCL are found; the wheel cached outside pip's cache, keyed by Horovod, TensorFlow, Python and GPU ops.

Why not `pip install horovod`: Horovod's extension links against TensorFlow's C++ ABI, so it must be built after TF
with `--no-build-isolation`; pip's wheel cache is keyed by the sdist alone and silently reuses a wheel built for
another TF, hence `--no-cache-dir` and our own cache (~/.cache/jupyter-dl/wheels/horovod-<v>-tf<v>-cp<xy>[-nccl], the
layout scripts/setup.sh has always used, so existing caches keep working)."""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from traitlets import Bool, Integer, Unicode, validate
from traitlets.config import Application

from jupyter_dl._version import __version__
from jupyter_dl.cli.build_prerequisites import find_cuda, find_nccl, fix_commands, pip_cmd, prerequisites, tf_include
from jupyter_dl.cli.checks import dist_version
from jupyter_dl.host import cache

BUILD_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "setuptools", "wheel")  # setup.py imports, no isolation
RUNTIME_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging")
_MODULE_OF = {"pyyaml": "yaml"}
SHIM_HEADER = "tensorflow/compiler/xla/client/xla_builder.h"
MOVED_HEADER = "xla/hlo/builder/xla_builder.h"


@dataclass
class Plan:
    key: str
    wheel_dir: Path
    cached_wheel: Path | None
    gpu_ops: str  # "" or "NCCL"
    gpu_reason: str
    env: dict = field(default_factory=dict)  # variables the build sets (beyond the inherited environment)
    command: list = field(default_factory=list)
    shim: Path | None = None


class InstallHorovodApp(Application):
    name = "jupyter-dl install-horovod"
    version = __version__
    description = (
        "Build Horovod against the installed TensorFlow (gloo always, NCCL when CUDA and NCCL are found), "
        "cache the wheel, and install it into this Python environment."
    )

    horovod_version = Unicode("0.28.1", help="Horovod release to build (0.28.1 is the last one).").tag(config=True)
    cache_dir = Unicode(
        help="Cache folder: wheels/<key>/ holds the built wheels, logs/ the build logs. Default: "
        "$JUPYTER_DL_CACHE, else ~/.cache/jupyter-dl."
    ).tag(config=True)
    gpu_operations = Unicode(
        help="GPU allreduce: 'auto' (NCCL when the CUDA toolkit and NCCL are found), 'NCCL', "
        "or 'none' (gloo on CPU only). Default: $HOROVOD_GPU_OPERATIONS, else auto."
    ).tag(config=True)
    jobs = Integer(0, help="Parallel compile jobs (MAKEFLAGS=-jN); 0: one per CPU core.").tag(config=True)
    dry_run = Bool(
        False, help="Print the prerequisites and the plan (cache key, environment, command); change nothing."
    ).tag(config=True)
    rebuild = Bool(
        False, help="Build even when Horovod works or a cached wheel exists (replaces the cached wheel)."
    ).tag(config=True)

    aliases = {
        "horovod-version": "InstallHorovodApp.horovod_version",
        "cache-dir": "InstallHorovodApp.cache_dir",
        "gpu-operations": "InstallHorovodApp.gpu_operations",
        "jobs": "InstallHorovodApp.jobs",
    }
    flags = {
        "dry-run": ({"InstallHorovodApp": {"dry_run": True}}, "Print the plan; change nothing."),
        "rebuild": ({"InstallHorovodApp": {"rebuild": True}}, "Build even when a cached wheel exists."),
    }

    def _cache_dir_default(self):
        return cache.cache_dir()

    def _gpu_operations_default(self):
        return os.environ.get("HOROVOD_GPU_OPERATIONS") or "auto"

    @validate("gpu_operations")
    def _check_gpu_operations(self, proposal):
        value = proposal["value"].strip()
        if value.lower() not in ("auto", "nccl", "none", ""):
            raise ValueError(f"gpu_operations must be auto, NCCL or none (got {value!r})")
        return {"": "none"}.get(value.lower(), value.lower())

    # -- what is needed ----------------------------------------------------------------------------------------
    def _path(self):
        # The venv's own bin first, as setup.sh did: a cmake from pip (`pip install cmake`) lives there.
        return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

    # -- the plan ---------------------------------------------------------------------------------------------
    def resolve_gpu_ops(self):
        if self.gpu_operations == "none":
            return "", "gpu_operations=none: CPU allreduce over gloo only"
        if self.gpu_operations == "nccl":
            return "NCCL", "gpu_operations=NCCL asked for"
        # A toolkit alone (a CPU build box, a CI image) is no reason for the longer NCCL build: ask for a driver.
        driver = os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi")
        cuda = find_cuda()
        nccl = find_nccl(cuda) if cuda else None
        if driver and cuda and nccl:
            return "NCCL", f"auto: NVIDIA driver, CUDA toolkit at {cuda} and NCCL at {nccl} found"
        lacking = "an NVIDIA driver" if not driver else "the CUDA toolkit (nvcc)" if not cuda else "NCCL"
        return "", f"auto: {lacking} not found, so gloo only"

    def plan(self):
        gpu_ops, reason = self.resolve_gpu_ops()
        tf = dist_version("tensorflow", "tensorflow-cpu", "tf-nightly") or "none"
        py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        key = f"horovod-{self.horovod_version}-tf{tf}-{py}" + (f"-{gpu_ops.lower()}" if gpu_ops else "")
        wheel_dir = Path(self.cache_dir, "wheels", key)
        cached = sorted(wheel_dir.glob(f"horovod-{self.horovod_version}-*.whl")) if wheel_dir.is_dir() else []
        env = {
            "CMAKE_POLICY_VERSION_MINIMUM": "3.5",  # cmake 4 refuses gloo's old cmake_minimum_required
            "HOROVOD_WITH_TENSORFLOW": "1",
            "HOROVOD_WITH_GLOO": "1",
            "HOROVOD_WITHOUT_MPI": "1",
            "HOROVOD_WITHOUT_PYTORCH": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
            "MAKEFLAGS": f"-j{self.jobs or os.cpu_count() or 1}",
            "PATH": self._path(),
        }
        shim = None
        tf_headers = tf_include()
        # TF >= 2.17 moved xla_builder.h; Horovod 0.28.1 still includes the old path. Only then add a forwarding
        # header: on an older TF it would shadow the real one.
        if tf_headers and not (tf_headers / SHIM_HEADER).exists() and (tf_headers / MOVED_HEADER).exists():
            shim = Path(self.cache_dir, "include-shim")
            env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(filter(None, [str(shim), os.environ.get("CPLUS_INCLUDE_PATH")]))
        if gpu_ops:
            env["HOROVOD_GPU_OPERATIONS"] = gpu_ops
            cuda = find_cuda()
            nccl = find_nccl(cuda)
            if cuda:
                env["HOROVOD_CUDA_HOME"] = cuda
            if nccl:
                env["HOROVOD_NCCL_HOME"] = nccl
        # -v: without it pip hides the compiler's output, which is our progress and the log's content.
        command = [
            *pip_cmd(),
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-cache-dir",
            "--no-deps",
            f"horovod=={self.horovod_version}",
            "-w",
            "<tmpdir>",
        ]
        return Plan(key, wheel_dir, cached[-1] if cached else None, gpu_ops, reason, env, command, shim)

    def installed(self, gpu_ops):
        """The Horovod importable here, if it is the wanted version with TF ops, gloo (and NCCL when asked)."""
        code = (
            "import horovod, horovod.tensorflow as h; "
            "print(horovod.__version__, bool(h.gloo_built()), bool(h.nccl_built()))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd="/",
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
        if out.returncode != 0:
            return None
        version, gloo, nccl = out.stdout.split()[-3:]
        return version == self.horovod_version and gloo == "True" and (nccl == "True" or not gpu_ops)

    # -- doing it ---------------------------------------------------------------------------------------------
    def say(self, message):
        print(f"[install-horovod] {message}", file=sys.stderr, flush=True)

    def _pip_install(self, *args):
        subprocess.run([*pip_cmd(), "install", "-q", "--disable-pip-version-check", *args], check=True)

    def _ensure_build_deps(self):
        missing = [d for d in BUILD_DEPS if importlib.util.find_spec(_MODULE_OF.get(d, d)) is None]
        if missing:
            self._pip_install(*missing)

    def build(self, plan):
        if plan.shim is not None:
            header = plan.shim / SHIM_HEADER
            header.parent.mkdir(parents=True, exist_ok=True)
            header.write_text(f'#include "{MOVED_HEADER}"\n')
        self._ensure_build_deps()
        logs = Path(self.cache_dir, "logs")
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{plan.key}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        tmp = Path(tempfile.mkdtemp(prefix="jdl-horovod-"))
        command = [str(tmp) if part == "<tmpdir>" else part for part in plan.command]
        env = dict(os.environ, **plan.env)
        if not plan.gpu_ops:
            env.pop("HOROVOD_GPU_OPERATIONS", None)  # an inherited value would turn NCCL on against the plan
        self.say(f"building Horovod {self.horovod_version} ({plan.key}); several minutes. Log: {log_path}")
        start = time.monotonic()
        with open(log_path, "w") as log_file:
            log_file.write(
                f"$ {' '.join(f'{k}={shlex.quote(v)}' for k, v in plan.env.items())} {shlex.join(command)}\n"
            )
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp
            )
            shown = -10
            for line in proc.stdout:
                log_file.write(line)
                # CMake's "[ 42%] Building CXX object ..." lines are the only progress the build reports.
                if line.startswith("[") and "%]" in line[:8]:
                    percent = int(line[1 : line.index("%")].strip() or 0)
                    if percent >= shown + 10:
                        shown = percent
                        self.say(f"{percent:3d}% compiled, {time.monotonic() - start:.0f} s")
            code = proc.wait()
        wheels = list(tmp.glob("horovod-*.whl"))
        if code != 0 or not wheels:
            tail = log_path.read_text(errors="replace").splitlines()[-25:]
            print("\n".join(tail), file=sys.stderr)
            shutil.rmtree(tmp, ignore_errors=True)
            self.say(f"build failed (exit {code}) after {time.monotonic() - start:.0f} s; full log: {log_path}")
            return None
        plan.wheel_dir.mkdir(parents=True, exist_ok=True)
        for old in plan.wheel_dir.glob("horovod-*.whl"):
            old.unlink()
        target = plan.wheel_dir / wheels[0].name
        shutil.move(str(wheels[0]), target)
        shutil.rmtree(tmp, ignore_errors=True)
        self.say(f"built in {time.monotonic() - start:.0f} s; cached {target}")
        return target

    def install(self, wheel, gpu_ops):
        self.say(f"installing {wheel}")
        self._pip_install("--no-deps", "--force-reinstall", str(wheel))
        missing = [d for d in RUNTIME_DEPS if importlib.util.find_spec(_MODULE_OF.get(d, d)) is None]
        if missing:
            self._pip_install(*missing)
        if not self.installed(gpu_ops):
            self.say(
                f"{wheel.name} installed but `import horovod.tensorflow` fails or lacks gloo"
                f"{'/NCCL' if gpu_ops else ''}; rebuild with: jupyter-dl install-horovod --rebuild"
            )
            return False
        return True

    def print_plan(self, plan, prereqs):
        width = max(len(p.name) for p in prereqs)
        print("prerequisites:")
        for p in prereqs:
            print(f"  {p.name.ljust(width)}  {'ok  ' if p.ok else 'MISSING'}  {p.found}")
        print(f"GPU operations: {plan.gpu_ops or 'none'} ({plan.gpu_reason})")
        print(f"cache key: {plan.key}")
        print(f"cached wheel: {plan.cached_wheel or 'none: build, then cache in ' + str(plan.wheel_dir)}")
        if plan.shim is not None:
            print(f'header shim: {plan.shim / SHIM_HEADER} -> #include "{MOVED_HEADER}"')
        print("build command:")
        print(
            "  "
            + " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items() if k != "PATH")
            + " "
            + shlex.join(plan.command)
        )

    def start(self):
        if self.extra_args:
            print(
                f"jupyter-dl install-horovod: unexpected argument {self.extra_args[0]!r}; see jupyter-dl "
                f"install-horovod --help",
                file=sys.stderr,
            )
            return 2
        plan = self.plan()
        prereqs = prerequisites(plan.gpu_ops, self._path())
        missing = [p for p in prereqs if not p.ok]
        if self.dry_run:
            self.print_plan(plan, prereqs)
            works = not self.rebuild and self.installed(plan.gpu_ops)
            step = (
                "nothing to do: Horovod works here"
                if works
                else f"install {plan.cached_wheel}"
                if plan.cached_wheel and not self.rebuild
                else "build, then install"
            )
            print(f"would: {step}")
            if missing and "build" in step:
                print("missing prerequisites; run:\n  " + "\n  ".join(fix_commands(missing)))
                return 2
            return 0
        if not self.rebuild and self.installed(plan.gpu_ops):
            self.say(
                f"Horovod {self.horovod_version} with TensorFlow and gloo{' and NCCL' if plan.gpu_ops else ''}"
                f" already works here"
            )
            return 0
        wheel = plan.cached_wheel if not self.rebuild else None
        if wheel is None:
            if missing:
                for p in missing:
                    self.say(f"missing {p.name}: {p.found}")
                self.say("install them first:\n  " + "\n  ".join(fix_commands(missing)))
                return 2
            wheel = self.build(plan)
            if wheel is None:
                return 1
        else:
            self.say(f"using cached wheel {wheel}")
        return 0 if self.install(wheel, plan.gpu_ops) else 1
