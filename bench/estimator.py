"""Estimator accuracy: leave-one-model-out MAPE of predicted step time on the shipped profiles (target: <= 8%).

For every profiled model, the estimator is fitted on all the other models' profiles and predicts this model's step
times at each profiled batch size. Prints the error per model and overall, per device kind.

    .venv/bin/python bench/estimator.py
"""

import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import _common  # noqa: E402

from jupyter_dl.recommend.estimator import PROFILES, leave_one_model_out  # noqa: E402


def main():
    load_before = _common.load_before()
    t_start = time.perf_counter()
    results = {}
    for path in sorted(PROFILES.glob("*.json")):
        profile = json.loads(path.read_text())
        per_model, overall = leave_one_model_out([profile])
        results[profile["device"]] = {
            "per_model": per_model,
            "mape": overall,
            "models": len(per_model),
            "rows": sum(len(m["rows"]) for m in profile["models"]),
        }
        print(f"device {profile['device']} ({len(per_model)} models, profiled {profile.get('collected', '?')})")
        for name, error in per_model.items():
            print(f"  {name:<22} {error:6.1%}")
        print(f"  leave-one-model-out MAPE {overall:6.1%}  target <= 8%: {'MET' if overall <= 0.08 else 'MISSED'}")
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "estimator.json", results, t_start, load_before, load_after, ("tensorflow", "scipy")
    )


if __name__ == "__main__":
    main()
