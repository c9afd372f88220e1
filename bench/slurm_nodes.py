"""Ranks from a multi-node Slurm (tests/support/slurm_nodes.py: slurmctld on a head namespace, slurmd on two node
namespaces): the same small zero-code Keras job (digits) on 1 node x 2 ranks, 2 nodes x 1 rank and 2 nodes x 2 ranks,
each on engines from one Slurm job shaped by its batch script; and the time from `%%distribute` to the job's first
training step, on Slurm's engines against the local cluster's (2 ranks each).

Per layout: the time `%dl_cluster start --engines slurm` took, the first cell (fresh engines), the median of warm runs
and, for each, the seconds from `%%distribute` to rank 0's first step (its first batch record in the job store).
All "nodes" share this machine's CPUs: the figures show what Slurm and the network path cost, not what two machines
would gain. Needs root (namespaces).

    .venv/bin/python bench/slurm_nodes.py [--warm 3] [--epochs 3]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="jdl-bench-ipython-")  # the profiles made here go with it
os.environ["JUPYTER_DATA_DIR"] = tempfile.mkdtemp(prefix="jdl-bench-data-")  # and the job store

import _common  # noqa: E402
import netns  # noqa: E402
import slurm_nodes  # noqa: E402
from digits_cells import DIGITS_MODEL  # noqa: E402

# The engines' batch script (ipyparallel's own, as in tests/cluster/test_slurm_nodes.py) with the layout's lines.
TEMPLATE = """#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=ipengine-{{cluster_id}}
#SBATCH --ntasks={{n}}
#SBATCH --output={{output_file}}
{layout}
srun {{program_and_args}}
"""
LAYOUTS = [  # name, ranks, sbatch lines
    ("1 node x 2 ranks", 2, "#SBATCH --nodes=1"),
    ("2 nodes x 1 rank", 2, "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1"),
    ("2 nodes x 2 ranks", 4, "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2"),
]


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    return {"x_train": (data.data / 16.0).astype("float32"), "y_train": data.target.astype("int64")}


def run_cell(shell, session, code):
    """(wall seconds of the cell, seconds from its start to rank 0's first training step)."""
    t0, wall0 = time.time(), time.perf_counter()
    result = shell.run_cell(code, store_history=False)
    wall = time.perf_counter() - wall0
    assert result.success, result.error_in_exec
    job = session.jobs.all()[-1]
    records, _ = session.store.metrics(job.id)
    first = min(r["t"] for r in records if r.get("kind") == "batch")
    return wall, first - t0


def measure(shell, start_line, n, epochs, warm, data):
    """Start a cluster (start_line), run the cell once fresh and `warm` times more, stop it."""
    from jupyter_dl.kernel import api
    from jupyter_dl.kernel.magics import DistributeMagics

    magics = DistributeMagics(shell)
    magics.session = api.Session(parent=shell)  # a new one per layout: it reads the layout's config
    shell.register_magics(magics)
    shell.user_ns.update(data)
    fit = f"model.fit(x_train, y_train, epochs={epochs}, batch_size=32, verbose=0)\n"
    code = f"%%distribute -n {n} --no-plot --name bench-slurm\n{DIGITS_MODEL}\n{fit}"
    try:
        t = time.perf_counter()
        shell.run_cell(start_line, store_history=False)
        started = time.perf_counter() - t
        hosts = magics.session.cluster.status().engines_by_host
        first = run_cell(shell, magics.session, code)
        warm_runs = [run_cell(shell, magics.session, code) for _ in range(warm)]
    finally:
        magics.session.cluster.stop()
    return {
        "hosts": {h: len(ids) for h, ids in hosts.items()},
        "start_s": started,
        "first_cell_s": first[0],
        "first_step_after_first_cell_s": first[1],
        "warm_cell_median_s": statistics.median(w for w, _ in warm_runs),
        "first_step_warm_median_s": statistics.median(s for _, s in warm_runs),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    why = netns.unavailable() or slurm_nodes.missing_packages()
    if why:
        sys.exit(f"cannot run: {why}")
    t_start = time.perf_counter()
    before = _common.load_before()
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext jupyter_dl", store_history=False)
    data = digits()
    results = {"local 2 ranks": measure(shell, "%dl_cluster start -n 2", 2, args.epochs, args.warm, data)}
    with slurm_nodes.nodes(Path(tempfile.mkdtemp(prefix="jdl-bench-slurm-"))):
        shell.config.Cluster = Config(controller_ip=netns.KERNEL_ADDRESS, controller_location=netns.KERNEL_ADDRESS)
        for name, n, layout in LAYOUTS:
            shell.config.SlurmEngineSetLauncher = Config(batch_template=TEMPLATE.format(layout=layout))
            line = f"%dl_cluster start --engines slurm -n {n}"
            results[f"slurm {name}"] = measure(shell, line, n, args.epochs, args.warm, data)
    print(f"\nzero-code digits fit, {args.epochs} epochs; warm = median of {args.warm}")
    print(f"{'':26s} {'start':>7s} {'1st cell':>9s} {'->step':>7s} {'warm':>7s} {'->step':>7s}  engines")
    for name, r in results.items():
        print(
            f"{name:26s} {r['start_s']:6.1f}s {r['first_cell_s']:8.1f}s {r['first_step_after_first_cell_s']:6.2f}s "
            f"{r['warm_cell_median_s']:6.1f}s {r['first_step_warm_median_s']:6.2f}s  {r['hosts']}"
        )
    local, slurm = results["local 2 ranks"], results["slurm 1 node x 2 ranks"]
    print(
        f"%%distribute -> first step, warm: Slurm 1x2 {slurm['first_step_warm_median_s']:.2f}s vs local "
        f"{local['first_step_warm_median_s']:.2f}s; first cell on fresh engines: "
        f"{slurm['first_step_after_first_cell_s']:.2f}s vs {local['first_step_after_first_cell_s']:.2f}s"
    )
    after = _common.print_load(before)
    _common.write_results(
        HERE / "results" / "slurm_nodes.json", results, t_start, before, after, ("ipyparallel", "horovod", "tensorflow")
    )


if __name__ == "__main__":
    main()
