"""nvidia-smi parsing, the one wrapper both GPU discovery and the panel's cluster view use. This machine has no GPU,
so a stand-in nvidia-smi script on PATH prints what the real one prints for `--query-gpu ... --format=csv,noheader,
nounits` on a 2-GPU host; the GPU-pinning tests run the real one where a GPU is lent."""

import os
import stat

import pytest

from jupyter_dl.host import gpus

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index) printf '0\\n1\\n' ;;
  --query-gpu=name) printf 'NVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\n' ;;
  --query-gpu=index,name,utilization.gpu,memory.used,memory.total)
    printf '0, NVIDIA H100 80GB HBM3, 87, 40321, 81559\\n1, NVIDIA H100 80GB HBM3, 0, 4, 81559\\n' ;;
  *) echo "unexpected $*" >&2; exit 2 ;;
esac
case "$2" in --format=csv,noheader,nounits) ;; *) echo "unexpected format $2" >&2; exit 2 ;; esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    gpus.discover.cache_clear()
    gpus.names.cache_clear()
    yield
    gpus.discover.cache_clear()
    gpus.names.cache_clear()


def test_discovery_and_names(fake_smi):
    assert gpus.discover() == [0, 1]
    assert gpus.names() == ["NVIDIA H100 80GB HBM3"] * 2
    assert gpus.select("1") == [1]


def test_stats_for_the_cluster_view(fake_smi):
    from jupyter_dl.server.cluster_info import gpu_stats

    assert gpu_stats() == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization": 87.0,
            "memory_used_mb": 40321.0,
            "memory_total_mb": 81559.0,
        },
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization": 0.0,
            "memory_used_mb": 4.0,
            "memory_total_mb": 81559.0,
        },
    ]


def test_no_nvidia_smi_means_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    gpus.discover.cache_clear()
    try:
        assert gpus.discover() == [] and gpus.stats() == []
    finally:
        gpus.discover.cache_clear()
