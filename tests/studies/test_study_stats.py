"""studies.stats: the paired t-test, Holm's correction, the cell text and a record's provenance, on known cases."""

import math
import statistics

import pytest
from scipy import stats as st

from studies.stats import (Family, PairedTest, add_record, family_verdicts, format_paired, holm, paired_test, provenance,
                           read_records, rule_text)


def _sample(mean: float, sd: float, n: int) -> list[float]:
    """n numbers with exactly this mean and sample standard deviation."""
    base = [i - (n - 1) / 2 for i in range(n)]
    s = math.sqrt(sum(b * b for b in base) / (n - 1))
    return [mean + sd * b / s for b in base]


def test_mean_1_sd_half_over_3_seeds_is_undecided():
    d = _sample(1.0, 0.5, 3)
    t = paired_test(d)
    assert t.n == 3 and t.df == 2
    assert t.mean == pytest.approx(1.0) and t.sd == pytest.approx(0.5)
    assert t.t == pytest.approx(1.0 / (0.5 / math.sqrt(3)))  # 3.46 < 4.30, the 5% critical value at 2 df
    assert t.p > 0.05
    assert t.verdict == "undecided"
    # the old rule (mean beyond two standard errors) would have said "holds" here
    assert t.mean > 2 * t.se


def test_mean_1_sd_half_over_10_seeds_holds_and_negative_is_reversed():
    assert paired_test(_sample(1.0, 0.5, 10)).verdict == "holds"
    r = paired_test(_sample(-1.0, 0.5, 10))
    assert r.verdict == "reversed" and r.t < 0 and r.p < 0.001


def test_too_few_seeds_and_edge_cases():
    assert paired_test([]).verdict == "too few seeds"
    assert paired_test([2.0]).verdict == "too few seeds"
    two = paired_test([5.0, 5.2])
    assert two.verdict == "too few seeds" and two.df == 1 and two.p < 0.05  # significant, but 2 seeds give no verdict
    const = paired_test([1.0, 1.0, 1.0])
    assert const.t == math.inf and const.p == 0.0 and const.verdict == "holds"
    zero = paired_test([0.0, 0.0, 0.0])
    assert zero.p == 1.0 and zero.verdict == "level"  # identical on every seed: the interval is [0, 0]


@pytest.mark.parametrize("a,b", [
    ([71.2, 70.1, 72.5, 69.8], [70.0, 70.3, 71.1, 68.2]),
    ([0.5, 0.61, 0.55], [0.52, 0.50, 0.49]),
    ([10, 12, 9, 11, 13, 8, 10], [11, 11, 10, 12, 12, 9, 9]),
])
def test_t_and_p_agree_with_scipy_ttest_rel(a, b):
    ref = st.ttest_rel(a, b)
    t = paired_test([x - y for x, y in zip(a, b)])
    assert t.t == pytest.approx(ref.statistic, rel=1e-9)
    assert t.p == pytest.approx(ref.pvalue, rel=1e-9)
    quiet = "level" if -1 <= t.lo and t.hi <= 1 else "undecided"
    assert t.verdict == (quiet if ref.pvalue >= 0.05 else ("holds" if ref.statistic > 0 else "reversed"))


def test_critical_value_at_two_degrees_of_freedom():
    # t just above and below 4.303 (two-sided 5%, 2 df) with 3 seeds
    for t_target, expect in [(4.4, "holds"), (4.2, "undecided")]:
        d = _sample(t_target / math.sqrt(3), 1.0, 3)
        assert paired_test(d).verdict == expect


def test_holm_on_known_pvalues():
    # m = 4 at 5%: thresholds 0.0125, 0.0167, 0.025, 0.05 on the sorted p-values
    assert holm([0.01, 0.04, 0.02, 0.005]) == [True, True, True, True]
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]  # 0.03 > 0.05/2 stops it
    assert holm([0.01, 0.04, 0.03, 0.02]) == [True, False, False, False]  # 0.02 > 0.05/3 stops it
    assert holm([0.013, 0.001]) == [True, True]  # 0.001 <= 0.025, then 0.013 <= 0.05
    assert holm([0.03, 0.03]) == [False, False]  # 0.03 > 0.025
    assert holm([0.2]) == [False]
    assert holm([]) == []
    assert holm([float("nan"), 0.001]) == [False, True]


def test_family_verdicts_apply_holm_but_keep_t_and_p():
    strong = _sample(2.0, 0.5, 5)   # p ~ 0.0007
    weak = _sample(1.0, 0.8, 5)     # p ~ 0.05 alone
    middling = _sample(-1.0, 0.6, 5)
    alone = [paired_test(d) for d in (strong, weak, middling)]
    fam = family_verdicts([strong, weak, middling])
    assert all(f.holm for f in fam)
    assert [f.p for f in fam] == [a.p for a in alone]
    assert fam[0].verdict == "holds"
    for a, f, flag in zip(alone, fam, holm([a.p for a in alone])):
        want = ("holds" if a.mean > 0 else "reversed") if flag else "undecided"
        assert f.verdict == want
    # a member significant alone can lose its verdict in the family
    single = paired_test(_sample(1.0, 0.4, 4))
    assert single.verdict == "holds" and 0.0125 < single.p < 0.05
    fam = family_verdicts([single] + [_sample(0.1, 1.0, 4)] * 3)
    assert fam[0].verdict == "undecided"
    # two seeds stay out of the family and keep "too few seeds"
    fam = family_verdicts([[1.0, 2.0], strong])
    assert fam[0].verdict == "too few seeds" and not fam[0].holm and fam[1].verdict == "holds"


def test_format_paired_cell_text():
    t = PairedTest(n=3, mean=1.2, sd=0.4, se=0.4 / math.sqrt(3), t=3.0, df=2, p=0.0955, verdict="undecided")
    assert format_paired(t) == "+1.2 ± 0.4 (t=3.0, p=0.10, undecided)"
    assert format_paired(t, verdict=False) == "+1.2 ± 0.4 (t=3.0, p=0.10)"
    r = paired_test([-2.0, -2.1, -1.9, -2.0])
    assert format_paired(r) == "-2.0 ± 0.1 [-2.1, -1.9] (t=-49.0, p=<0.001, reversed)"
    assert format_paired(paired_test([])) == "—"


def test_provenance_names_commit_dirty_and_versions():
    import torch
    import transformers

    p = provenance()
    assert set(p) == {"git_commit", "git_dirty", "git_dirty_code", "attnkit_version", "torch_version", "transformers_version"}
    assert p["torch_version"] == torch.__version__
    assert p["transformers_version"] == transformers.__version__
    assert p["attnkit_version"]
    if p["git_commit"] is not None:  # a source checkout
        assert len(p["git_commit"]) == 40 and isinstance(p["git_dirty"], bool)


def test_a_changed_records_file_leaves_the_code_clean_and_a_changed_module_does_not(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "r.json").write_text("[]\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert provenance(tmp_path)["git_dirty"] is False and provenance(tmp_path)["git_dirty_code"] is False
    (tmp_path / "r.json").write_text("[1]\n")  # a study writing its own records
    p = provenance(tmp_path)
    assert p["git_dirty"] is True and p["git_dirty_code"] is False
    (tmp_path / "m.py").write_text("x = 2\n")
    assert provenance(tmp_path)["git_dirty_code"] is True


def test_records_are_added_by_key_replaced_in_place_and_sorted(tmp_path):
    path = tmp_path / "r" / "records.json"
    assert read_records(path) == []
    add_record(path, {"task": "b", "method": "m", "seed": 2, "x": 1})
    add_record(path, {"task": "a", "method": "m", "seed": 1, "x": 2})
    seen = []
    add_record(path, {"task": "b", "method": "m", "seed": 2, "x": 3}, then=seen.append)  # the same cell again
    assert [(r["task"], r["x"]) for r in read_records(path)] == [("a", 2), ("b", 3)]
    assert seen and seen[0] == read_records(path)


def test_a_family_fills_each_cell_with_its_holm_verdict():
    fam = Family()
    weak = _sample(1.0, 0.5, 4)  # t = 4.0, p = 0.028: holds alone, not in a family of three (0.028 > 0.05 / 3)
    assert paired_test(weak).verdict == "holds" and 0.0167 < paired_test(weak).p < 0.05
    lines = [f"| {x} | {fam.add(weak, 'three')} |" for x in "abc"]
    lines += [f"| d | {fam.add(weak)} |", f"| e | {fam.add(_sample(2.0, 0.5, 5), 'two')} |", f"| f | {fam.add(weak, 'two')} |",
              f"| g | {fam.add([], 'three')} |"]
    out = fam.fill(lines)
    assert all(line == "| %s | +1.0 ± 0.5 [+0.2, +1.8] (4/4, t=4.0, p=0.03) | undecided |" % x for x, line in zip("abc", out[:3]))
    assert out[3].endswith("| holds |")  # standing alone
    # beside a strong one (p < 0.001 <= 0.05 / 2) the weak one is tested against 0.05 and holds
    assert out[4].startswith("| e | +2.0 ± 0.5 [+1.4, +2.6] (5/5, t=8.9,") and out[4].endswith("| holds |") and out[5].endswith("| holds |")
    assert out[6] == "| g | — | — |"


@pytest.mark.parametrize("d", [[0.3, -0.2, 0.1, 0.4, -0.1], [1.0, -1.0, 0.5], [2.5, -0.4, 1.1, 0.2]])
def test_the_interval_is_students_95_percent_interval_of_the_mean_difference(d):
    t = paired_test(d)
    lo, hi = st.t.interval(0.95, len(d) - 1, loc=statistics.fmean(d), scale=st.sem(d))
    assert t.lo == pytest.approx(lo, rel=1e-9) and t.hi == pytest.approx(hi, rel=1e-9)
    # p < 5% exactly when the interval excludes zero
    assert (t.p < 0.05) == (t.lo > 0 or t.hi < 0)


def test_level_only_when_the_interval_lies_inside_the_margin():
    tight = [0.2, -0.1, 0.0, 0.3, -0.2, 0.1]  # mean 0.05, interval about [-0.16, +0.26]
    t = paired_test(tight)
    assert not t.p < 0.05 and -1 < t.lo and t.hi < 1 and t.verdict == "level"
    assert paired_test(tight, margin=0.2).verdict == "undecided"  # the interval pokes out of a narrower margin
    assert paired_test(tight, margin=None).verdict == "undecided"  # no margin stated: never level
    wide = [1.5, -1.0, 0.4]  # not significant, but the interval reaches beyond ±1: no parity shown
    w = paired_test(wide)
    assert not w.p < 0.05 and (w.lo < -1 or w.hi > 1) and w.verdict == "undecided"
    # a significant difference keeps its direction even inside the margin
    small = paired_test([0.3, 0.31, 0.29, 0.3])
    assert small.hi < 1 and small.verdict == "holds"
    # three seeds at least, as for the other verdicts
    assert paired_test([0.0, 0.1]).verdict == "too few seeds"


def test_a_family_member_holm_does_not_reject_is_level_or_undecided_by_its_own_interval():
    weak = _sample(0.4, 0.3, 4)  # t = 2.67, p = 0.076: not rejected; interval [-0.08, +0.88]
    wide = _sample(1.0, 0.5, 4)  # p = 0.028 alone, not under Holm beside three; interval [+0.2, +1.8]
    fam = family_verdicts([_sample(3.0, 0.5, 6), weak, wide, _sample(0.0, 0.1, 6)])
    assert fam[0].verdict == "holds"
    assert [f.verdict for f in fam[1:]] == ["level", "undecided", "level"] and all(f.holm for f in fam)


def test_the_rule_states_the_margin_and_the_interval():
    text = rule_text(family="x")
    assert "**level**" in text and "±1 point" in text and "95% confidence interval" in text and "**undecided**" in text
    assert "no comparison is called level" in rule_text(margin=None)
