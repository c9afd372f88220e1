"""What building Horovod from source needs on this machine, where each piece was found, and how to get the rest."""

import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from jupyter_dl.cli.checks import dist_version


@dataclass
class Prerequisite:
    name: str
    ok: bool
    found: str
    apt: str = ""  # Debian package that provides it
    conda: str = ""  # conda-forge package that provides it
    other: str = ""  # the fix when neither package manager applies


def _include_dirs():
    """Where the compiler looks for headers: the env's own paths first, then the system's and conda's."""
    dirs = []
    for var in ("CPLUS_INCLUDE_PATH", "CPATH", "C_INCLUDE_PATH"):
        dirs += [d for d in os.environ.get(var, "").split(os.pathsep) if d]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(os.path.join(os.environ["CONDA_PREFIX"], "include"))
    return dirs + ["/usr/local/include", "/usr/include"]


def _find_header(relative):
    return next((os.path.join(d, relative) for d in _include_dirs() if os.path.isfile(os.path.join(d, relative))), None)


def tf_include():
    spec = importlib.util.find_spec("tensorflow")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(os.path.join(location, "include")):
            return Path(location, "include")
    return None


def _which(name, path):
    return shutil.which(name, path=path)


def find_cuda():
    """CUDA toolkit root with nvcc (what Horovod's CMake needs to build the NCCL ops), or None."""
    candidates = [os.environ.get("HOROVOD_CUDA_HOME"), os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    return next((c for c in candidates if c and os.path.isfile(os.path.join(c, "bin", "nvcc"))), None)


def find_nccl(cuda_home=None):
    """NCCL root holding include/nccl.h and lib*/libnccl.so (Debian's libnccl-dev: /usr), or None."""
    candidates = [os.environ.get("HOROVOD_NCCL_HOME"), cuda_home, os.environ.get("CONDA_PREFIX"), "/usr/local", "/usr"]
    for root in filter(None, candidates):
        if not os.path.isfile(os.path.join(root, "include", "nccl.h")):
            continue
        libs = [Path(root, d) for d in ("lib", "lib64", f"lib/{sysconfig.get_config_var('MULTIARCH') or ''}")]
        if any(any(lib.glob("libnccl.so*")) for lib in libs if lib.is_dir()):
            return root
    return None


def pip_cmd():
    return [sys.executable, "-m", "pip"]


def prerequisites(gpu_ops, path):
    """What building Horovod needs here (compiler, cmake, headers; CUDA and NCCL for NCCL ops), found or not."""
    tf = dist_version("tensorflow", "tensorflow-cpu", "tf-nightly")
    cmake = _which("cmake", path)
    cxx = os.environ.get("CXX") or next((c for c in ("g++", "c++", "clang++") if _which(c, path)), None)
    cxx = _which(cxx, path) if cxx else None
    py_h = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    pyver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    items = [
        Prerequisite(
            "TensorFlow", bool(tf), tf or "not installed", other=f"{shlex.join(pip_cmd())} install tensorflow"
        ),
        Prerequisite(
            "cmake",
            bool(cmake),
            cmake or "not on PATH",
            apt="cmake",
            conda="cmake",
            other=f"{shlex.join(pip_cmd())} install cmake",
        ),
        Prerequisite(
            "C++ compiler",
            bool(cxx),
            cxx or "no g++/c++/clang++ on PATH (or $CXX)",
            apt="g++",
            conda="cxx-compiler",
        ),
        Prerequisite(
            "highwayhash headers",
            bool(_find_header("highwayhash/highwayhash.h")),
            _find_header("highwayhash/highwayhash.h") or "highwayhash/highwayhash.h not found",
            apt="libhighwayhash-dev",
            other="put highwayhash's headers on CPLUS_INCLUDE_PATH (TensorFlow's headers include them)",
        ),
        Prerequisite(
            "farmhash headers",
            bool(_find_header("farmhash.h")),
            _find_header("farmhash.h") or "farmhash.h not found",
            apt="libfarmhash-dev",
            other="put farmhash.h on CPLUS_INCLUDE_PATH (TensorFlow's headers include it)",
        ),
        Prerequisite(
            "Python headers",
            os.path.isfile(py_h),
            py_h if os.path.isfile(py_h) else "Python.h not found",
            apt=f"python{pyver}-dev",
            conda=f"python={pyver}",
        ),
    ]
    if gpu_ops == "NCCL":
        cuda = find_cuda()
        nccl = find_nccl(cuda)
        items += [
            Prerequisite(
                "CUDA toolkit (nvcc)",
                bool(cuda),
                cuda or "nvcc not found (CUDA_HOME, PATH, /usr/local/cuda)",
                conda="cuda-toolkit",
                other="install NVIDIA's CUDA toolkit and set CUDA_HOME",
            ),
            Prerequisite(
                "NCCL",
                bool(nccl),
                nccl or "nccl.h + libnccl.so not found (HOROVOD_NCCL_HOME, /usr)",
                apt="libnccl-dev",
                conda="nccl",
                other="install NCCL (libnccl2 libnccl-dev from NVIDIA's repository), set HOROVOD_NCCL_HOME",
            ),
        ]
    return items


def fix_commands(missing):
    """The exact commands for what is missing, for the package manager this machine has."""
    sudo = "" if os.geteuid() == 0 else "sudo "
    commands, rest = [], list(missing)
    if shutil.which("apt-get") and any(p.apt for p in missing):
        commands.append(f"{sudo}apt-get install -y {' '.join(p.apt for p in missing if p.apt)}")
        rest = [p for p in missing if not p.apt]
    elif os.environ.get("CONDA_PREFIX") and shutil.which("conda") and any(p.conda for p in missing):
        commands.append(f"conda install -y -c conda-forge {' '.join(p.conda for p in missing if p.conda)}")
        rest = [p for p in missing if not p.conda]
    commands += [p.other or f"install {p.apt or p.conda} with your system's package manager" for p in rest]
    return commands
