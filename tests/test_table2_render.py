"""The verdicts and the paired table that benchmarks/ssaf_table2.py publishes (README's "Does sparse attention help?")."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "ssaf_table2.py"


@pytest.fixture(scope="module")
def t2():
    spec = importlib.util.spec_from_file_location("ssaf_table2", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_verdict_is_the_sign_of_the_mean_against_two_standard_errors(t2):
    assert t2.verdict([1.0, 1.2, 0.8]) == "holds"
    assert t2.verdict([-1.0, -1.2, -0.8]) == "reversed"
    assert t2.verdict([1.0, -1.0, 0.5]) == "within noise"  # mean 0.17, standard error 0.60
    assert t2.verdict([2.0]) == "too few seeds"


def _rec(task, method, seed, test):
    return {"task": task, "method": method, "seed": seed, "lam": None if method == "softmax" else -6.0, "epochs": 5,
            "lr": 2e-5, "batch_size": 16, "max_length": 128, "train_size": 100, "dev_accuracy": 0.5,
            "test_accuracy": test, "train_seconds": 60.0}


def test_render_pairs_by_seed_and_pools_every_pair(t2):
    recs = [_rec("sentube-auto", "softmax", s, t) for s, t in ((1, 0.70), (2, 0.60), (3, 0.65))]
    recs += [_rec("sentube-auto", "SSAF", s, t) for s, t in ((1, 0.69), (2, 0.59), (3, 0.645))]
    recs += [_rec("semeval2013", "softmax", s, 0.70) for s in (1, 2)] + [_rec("semeval2013", "SSAF", s, 0.72) for s in (1, 2)]
    recs.append(_rec("semeval2013", "SSAF", 3, 0.99))  # no softmax run on seed 3: not in any paired difference
    text = t2.render(recs, {})
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if "− softmax" in line}
    # sentube-auto: -1.0, -1.0, -0.5 points, paired by seed although the accuracies differ 10 points across seeds
    auto = rows[("sentube-auto", "SSAF − softmax")]
    assert auto[2] == "70.3 → 72.4 (+2.1)" and auto[3] == "-0.8 ± 0.3" and auto[4] == "0/3" and auto[5] == "reversed"
    sem = rows[("semeval2013", "SSAF − softmax")]
    assert sem[3] == "2.0 ± 0.0" and sem[4] == "2/2" and sem[5] == "holds"
    pooled = next(v for k, v in rows.items() if k[0].startswith("all 2 sets pooled (5 pairs)"))
    assert pooled[4] == "2/5" and pooled[5] == "within noise"
