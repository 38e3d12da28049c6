"""The verdicts and the paired tables the study runners publish (studies/ssaf, studies/sesamebert, studies/faithfulness)."""

import json

import pytest

from studies.sesamebert.cells import kernel_weights


@pytest.fixture(scope="module")
def t2():
    from studies.ssaf import ssaf_table2

    return ssaf_table2


def test_verdict_is_a_two_sided_paired_t_test_at_5_percent(t2):
    assert t2.verdict([1.0, 1.2, 0.8]) == "holds"  # t = 8.7 > 4.30 (2 degrees of freedom)
    assert t2.verdict([-1.0, -1.2, -0.8]) == "reversed"
    # mean 0.17, standard error 0.60: not significant, and the 95% interval [-2.4, +2.8] reaches past ±1: undecided
    assert t2.verdict([1.0, -1.0, 0.5]) == "undecided"
    # beyond two standard errors (the old rule's "holds") but t = 3.5 < 4.30: not significant; interval [-0.2, +2.2]
    assert t2.verdict([1.0, 1.5, 0.5]) == "undecided"
    # not significant and the interval [-0.3, +0.3] inside ±1 point: level (parity shown, not merely no difference)
    assert t2.verdict([0.1, -0.1, 0.1]) == "level"
    assert t2.verdict([2.0]) == "too few seeds" and t2.verdict([2.0, 2.1]) == "too few seeds"


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
    assert auto[2] == "70.3 → 72.4 (+2.1)" and auto[3] == "-0.8 ± 0.3 [-1.6, -0.1] (0/3, t=-5.0, p=0.04)" and auto[4] == "reversed"
    sem = rows[("semeval2013", "SSAF − softmax")]
    assert sem[3].startswith("+2.0 ± 0.0 [+2.0, +2.0] (2/2,") and sem[4] == "too few seeds"  # two seeds give no verdict
    pooled = next(v for k, v in rows.items() if k[0].startswith("all 2 sets pooled (5 pairs)"))
    assert pooled[3].startswith("+0.3 ± 1.6 [-1.6, +2.2] (2/5,") and pooled[4] == "undecided"
    assert "Holm's correction" in text and "paired t-test" in text


def test_entmax_section_pairs_each_map_with_softmax_and_ssaf_and_pools_sets(t2):
    recs = []
    for task, base in (("sentube-auto", 0.70), ("semeval2013", 0.75)):
        recs += [_rec(task, "softmax", s, base) for s in (1, 2, 3)] + [_rec(task, "SSAF", s, base - 0.01) for s in (1, 2, 3)]
        recs += [dict(_rec(task, "entmax15", s, base - 0.02 + 0.01 * (task == "semeval2013")), dev_nonzeros_per_row=5.0,
                      dev_mean_length=30.0) for s in (1, 2, 3)]
    recs.append(_rec("semeval2013", "entmax15+alpha-warmup", 1, 0.76))  # one set only: no pooled row
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[1:-1]]
            for line in t2.render(recs, {}).split("## The entmax family")[1].splitlines() if line.startswith("| ")}
    auto, sem = rows[("sentube-auto", "entmax15")], rows[("semeval2013", "entmax15")]
    assert auto[4] == "5.00 of 30.0" and auto[5].startswith("-2.0 ± 0.0 [-2.0, -2.0] (0/3,") and auto[6] == "reversed"
    assert auto[7].startswith("-1.0 ± 0.0 [-1.0, -1.0] (0/3,")
    assert sem[5].startswith("-1.0 ± 0.0 [-1.0, -1.0] (0/3,") and sem[7].startswith("+0.0 ± 0.0 [+0.0, +0.0] (0/3,")
    assert sem[8] == "level"  # the same accuracy on every seed: an interval of width 0 at 0
    pooled = rows[("all 2 sets pooled", "entmax15")]
    assert pooled[2] == "6 pairs" and pooled[5].startswith("-1.5 ± 0.5 [-2.1, -0.9] (0/6, t=-6.7,") and pooled[6] == "reversed"
    assert pooled[7].startswith("-0.5 ± 0.5 [-1.1, +0.1] (0/6,") and pooled[8] == "undecided"
    assert not any(k[0].startswith("all") and k[1] == "entmax15+alpha-warmup" for k in rows)


@pytest.fixture(scope="module")
def sesame():
    """studies/sesamebert's cells and tables, one namespace."""
    import types

    from studies.sesamebert import cells, render

    public = lambda mod: {k: v for k, v in vars(mod).items() if not k.startswith("_")}  # noqa: E731
    return types.SimpleNamespace(**{**public(cells), **public(render)})


def _srec(variant, seed, dev, sha="x", heldout=None, sigma=None, blur="none"):
    return {"task": "rte", "variant": variant, "blur": blur, "blur_sigma": sigma, "seed": seed, "metric": "accuracy",
            "kernel": None if sigma is None else [round(x, 4) for x in kernel_weights(sigma)],
            "dev_metric": dev, "heldout_metric": heldout, "weights_sha256": sha, "holdout": 0.1 if heldout is not None else 0.0}


def test_sesame_identity_sigmas_borrow_softmax_only_where_checked_and_selection_is_rendered(sesame):
    assert sesame.is_identity(0.01) and sesame.is_identity(0.1)
    assert not sesame.is_identity(0.3) and not sesame.is_identity(None)
    soft = [_srec("softmax", s, d, sha=f"s{s}") for s, d in ((1, 0.60), (2, 0.58), (3, 0.62), (4, 0.56))]
    recs = soft + [_srec("blur-context-0.01", 1, 0.60, sha="s1", sigma=0.01, blur="context"),
                   _srec("blur-context-0.1", 1, 0.60, sha="s1", sigma=0.1, blur="context"),
                   _srec("blur-value-0.01", 1, 0.61, sha="other", sigma=0.01, blur="value")]  # not softmax's: no borrowing
    recs += [_srec(f"blur-context-{x:g}", s, 0.61 if x == 0.5 else 0.55, sigma=x, blur="context", sha=f"b{x}{s}")
             for s in (1, 2, 3, 4) for x in (0.3, 0.5)]
    by = sesame.by_cell(recs)
    assert by[("rte", "blur-context-0.01")][3]["dev_metric"] == 0.62 and by[("rte", "blur-context-0.01")][3]["same_as"] == "softmax"
    assert set(by[("rte", "blur-value-0.01")]) == {1}
    held = [_srec("softmax", s, 0.5, heldout=0.5) for s in (1, 2)]
    held += [_srec(f"blur-context-{x:g}", s, 0.5 + (0.1 if x == 0.3 else 0), heldout=0.7 if x == 0.3 else 0.5, sigma=x, blur="context",
                   sha="s" if x < 0.2 else "y") for s in (1, 2) for x in (0.01, 0.1, 0.3, 0.5)]
    md = sesame.render(recs, held)
    assert "| rte (accuracy) | blur-context-0.1 | 0.000, 1.000, 0.000 | 1 (+2,3,4 = softmax's) | 59.0 ± 2.6 | +0.0 ± 0.0 [+0.0, +0.0] (0/4, t=—, p=1.00) | level |" in md
    # the kernel from the sigma, rounded once (0.10651 is 0.107; the record's 4-digit 0.1065 printed 0.106)
    assert "| rte (accuracy) | blur-context-0.5 | 0.107, 0.787, 0.107 | 1,2,3,4 |" in md
    paper = next(line for line in md.splitlines() if "paper: best sigma" in line and "| context |" in line)
    # per seed the best of {softmax's run twice (0.01, 0.1), 0.55, 0.61}: seed 3's softmax run (0.62) wins at sigma 0.01
    assert "| 1: 0.5, 2: 0.5, 3: 0.01, 4: 0.5 | 61.2 ± 0.5 | +2.2 ± 2.2 [-1.3, +5.8] (3/4, t=2.0, p=0.14) | undecided |" in paper
    clean = next(line for line in md.splitlines() if "clean: sigma (and epoch) by a held-out" in line and "| context |" in line)
    assert "| 1: 0.3, 2: 0.3 | 60.0 ± 0.0 | +10.0 ± 0.0 [+10.0, +10.0] (2/2, " in clean and "| too few seeds |" in clean
    assert "held-out 10% of train" in clean
    # the grid holds 3 distinct models per seed (softmax's run twice, 0.3, 0.5): selection alone is the best of 3
    # softmax seeds minus their mean, over the 4 choices of 3 of (60, 58, 62, 56): (2 + 2 + 2.67 + 3.33) / 4 = 2.5
    alone = next(line for line in md.splitlines() if "selection alone: best of 3" in line)
    assert "| 2.5 (over 4 choices of 3) |" in alone
    three = sesame.render([r for r in recs if r["seed"] != 4])  # as many softmax seeds as distinct runs: one choice
    assert "| 2.0 (over 1 choice of 3) |" in next(line for line in three.splitlines() if "selection alone: best of 3" in line)
    # an identity sigma whose run is not softmax's model at its check seed is never borrowed for other seeds
    assert sesame.identity_checked(recs, "rte", "blur-context-0.01") and not sesame.identity_checked(recs, "rte", "blur-value-0.01")
    assert not sesame.identity_checked(recs, "rte", "blur-context-1")  # never run


def test_sesame_paper_protocol_lets_softmax_stand_in_for_identity_sigmas_only_where_none_was_run(sesame):
    recs = [_srec("softmax", s, d) for s, d in ((1, 0.60), (2, 0.58), (3, 0.62))]
    recs += [_srec(f"blur-value-{x:g}", s, d, sigma=x, blur="value", sha=f"v{x}{s}")
             for s, d in ((1, 0.61), (2, 0.57), (3, 0.61)) for x in (0.3, 0.5)]
    paper = next(ln for ln in sesame.render(recs).splitlines() if "paper: best sigma" in ln and "| value |" in ln)
    # seeds 1: 0.3 (61 > 60), 2: softmax's run (58 > 57) as sigma 0.01, 3: softmax's run (62 > 61)
    assert "(0.01 and 0.1 not run: softmax's runs stand in) | 1,2,3 | 1: 0.3, 2: 0.01, 3: 0.01 | 60.3 ± 2.1 | +0.3 ± 0.6 [-1.1, +1.8] (1/3, t=1.0, p=0.42) | undecided |" in paper
    assert "| blur-value-0.01 |" not in sesame.render(recs)  # the stand-ins choose; they are not rows of the table
    # one identity run of the task (a check seed): by_cell's rule decides, and nothing stands in
    recs.append(_srec("blur-value-0.01", 1, 0.60, sigma=0.01, blur="value"))
    assert "stand in" not in sesame.render(recs)


def test_sesame_table_says_which_machine_trained_which_seeds_and_flags_pairs_that_span_two(sesame):
    cpu, gpu = "x86_64, 2 cores", "x86_64, 16 cores, NVIDIA H200"
    recs = [{**_srec(v, s, 0.6, sigma=x, blur=b), "machine": cpu if s == 1 else gpu}
            for s in (1, 2, 3) for v, x, b in (("softmax", None, "none"), ("blur-value-0.5", 0.5, "value"))]
    line = next(ln for ln in sesame.render(recs).splitlines() if ln.startswith("Trained on:"))
    assert f"{gpu}: rte seeds 2,3; {cpu}: rte seeds 1 (every seed's cells on one machine" in line
    recs[-1]["machine"] = cpu  # seed 3's blur run moves to the CPU: its pair now mixes machines
    line = next(ln for ln in sesame.render(recs).splitlines() if ln.startswith("Trained on:"))
    assert f"{cpu}: rte seeds 1,3" in line and "span machines (their paired differences mix machines): rte 3)" in line
    one = [{**r, "machine": cpu} for r in recs]  # one machine: nothing to say
    assert "Trained on:" not in sesame.render(one)


def test_sesame_table3_sigma_is_the_clean_protocols_most_frequent_choice(sesame):
    def held(seed_best):  # per seed, the sigma with the best held-out score
        recs = [_srec("softmax", s, 0.5, heldout=0.5) for s in seed_best]
        recs += [_srec(f"blur-context-{x:g}", s, 0.5, heldout=0.7 if x == best else 0.5, sigma=x, blur="context", sha=f"{x}{s}")
                 for s, best in seed_best.items() for x in (0.01, 0.1, 0.3, 0.5)]
        return recs

    sigma, why = sesame.clean_sigma(held({1: 0.3, 2: 0.5, 3: 0.3}))
    assert sigma == 0.3 and "at 2 of 3 seeds (1: 0.3, 2: 0.5, 3: 0.3)" in why
    assert "Table 3 and HANS blur on the context layer at sigma 0.3" in sesame.render([_srec("softmax", 1, 0.6)], held({1: 0.3, 2: 0.5, 3: 0.3}))
    sigma, why = sesame.clean_sigma(held({1: 0.3, 2: 0.5}))
    assert sigma is None and "tie" in why and "--sigma" in why
    sigma, why = sesame.clean_sigma(held({1: 0.3})[:-1])  # seed 1 lacks sigma 0.5: no complete seed
    assert sigma is None and "no held-out runs" in why
    assert sesame.clean_sigma(held({1: 0.3}), place="value")[0] is None  # only context was run


def test_sesame_table3_borrows_table2s_runs_only_where_the_same_model_was_checked(sesame):
    t2 = [_srec("softmax", s, 0.56 + s / 100, sha=f"soft{s}") for s in (1, 2, 3)]
    t2 += [_srec("blur-context-0.5", s, 0.57, sha=f"blur{s}", sigma=0.5, blur="context") for s in (1, 2)]
    t3 = [dict(_srec("last|softmax", 1, 0.57, sha="soft1"), layer_pooling="last", se=False)]
    twin = sesame.table2_twin(t3, t2, "last|softmax", 0.5, 2)
    assert twin["dev_metric"] == t2[1]["dev_metric"] and twin["variant"] == "last|softmax" and twin["same_as"] == "Table 2's softmax"
    assert sesame.table2_twin(t3, t2, "last|blur", 0.5, 2) is None  # never run at a check seed: no evidence
    assert sesame.table2_twin(t3, t2, "weighted|softmax", 0.5, 2) is None  # not Table 2's model
    t3_blur = [_srec("last|blur", 1, 0.57, sha="blur1", sigma=0.5, blur="context")]
    assert sesame.table2_twin(t3_blur, t2, "last|blur", 0.5, 3) is None  # Table 2 lacks seed 3
    assert sesame.table2_twin(t3_blur, t2, "last|blur", 0.3, 2) is None  # another sigma: another model
    assert sesame.table2_twin(t3_blur, t2, "last|blur", 0.5, 2)["same_as"] == "Table 2's blur-context-0.5"
    differs = [_srec("last|softmax", 1, 0.57, sha="other")]
    assert sesame.table2_twin(differs, t2, "last|softmax", 0.5, 2) is None  # weights differ at the check seed
    md = sesame.render_table3(t3 + [twin])
    assert "| last | 57.5 ± 0.7 (2) |" in md
    assert "last|softmax, seeds 2: Table 2's softmax's records, the same model (run at seeds 1" in md


def test_sesame_figure4_sets_each_seeds_se_weights_beside_their_initial_values(sesame, tmp_path):
    def rec(variant, seed, w, w0):
        return {**_srec(variant, seed, 0.6), "se": "SE" in variant, "layer_pooling": variant.split("|")[0], "se_weights": w, "se_weights_init": w0}

    recs = [rec("weighted|SE", 1, [0.5, 0.7], [0.5, 0.6]), rec("weighted|SE", 2, [0.7, 0.9], [0.6, 0.9]),
            rec("last|SE", 1, [0.4, 0.4], None), rec("last|softmax", 1, [9, 9], [9, 9])]
    png = sesame.figure4(recs, None, tmp_path / "fig4")
    out = json.loads((tmp_path / "fig4.json").read_text())
    assert png.is_file() and (tmp_path / "fig4.svg").is_file() and set(out) == {"weighted|SE", "last|SE"}
    assert out["weighted|SE"]["mean"] == pytest.approx([0.6, 0.8]) and out["weighted|SE"]["initial_mean"] == pytest.approx([0.55, 0.75])
    assert out["weighted|SE"]["largest_change"] == pytest.approx(0.1) and out["weighted|SE"]["seeds"] == 2
    assert "initial_mean" not in out["last|SE"]  # a seed whose initial model is unknown: no reference drawn


def test_sesame_table3_pooling_lr_runs_the_se_columns_and_pairs_them_with_the_papers_lr(sesame):
    import types

    a = types.SimpleNamespace(strategies=["weighted"], pooling_lr=1e-3, sigma=0.5)
    cells = list(sesame.table3_cells(a))
    assert [c[0] for c in cells] == ["weighted|SE|plr0.001", "weighted|SE+blur|plr0.001"]
    assert cells[1][1:] == ("context", 0.5, dict(pooling="weighted", se=True, pooling_lr=1e-3))
    assert [c[0] for c in sesame.table3_cells(types.SimpleNamespace(strategies=["last"], pooling_lr=None, sigma=0.5))] == \
        ["last|softmax", "last|SE", "last|blur", "last|SE+blur"]
    recs = [dict(_srec(f"weighted|{v}", s, d + 0.01 * s), se="SE" in v, layer_pooling="weighted", pooling_lr=1e-3 if "plr" in v else None)
            for v, d in (("softmax", 0.55), ("SE", 0.56), ("SE|plr0.001", 0.60)) for s in (1, 2, 3)]
    md = sesame.render_table3(recs)
    row = next(line for line in md.splitlines() if line.startswith("| weighted | SE | 0.001 |"))
    assert "| 62.0 ± 1.0 (3) | +5.0 ± 0.0 [+5.0, +5.0] (3/3, t=∞, p=<0.001), holds | +4.0 ± 0.0 [+4.0, +4.0] (3/3, t=∞, p=<0.001), holds |" in row
    assert sesame.in_figure4(recs[-1]) and not sesame.in_figure4(recs[0])


def test_sesame_table3_and_hans_pair_by_seed(sesame):
    recs = [dict(_srec(f"last|{v}", s, 0.6 + (0.02 if v == "SE" else 0) + 0.001 * s), se=v.startswith("SE"),
                 blur_sigma=0.5 if "blur" in v else None) for v in ("softmax", "SE", "blur", "SE+blur") for s in (1, 2, 3)]
    md = sesame.render_table3(recs)
    row = next(line for line in md.splitlines() if line.startswith("| last |"))
    assert "| +2.0 ± 0.0 [+2.0, +2.0] (3/3, t=∞, p=<0.001), holds |" in row and "| +0.0 ± 0.0 [+0.0, +0.0] (0/3, t=—, p=1.00), level |" in row
    assert "Blur sigma: 0.5" in md and "Holm's correction across every paired cell" in md

    def hans(seed, name, lex_non):
        by = {h: {"entailment": 0.9, "non-entailment": 0.1} for h in sesame.HEURISTICS}
        by["lexical_overlap"]["non-entailment"] = lex_non
        return {**_srec(name, seed, 0.7), "task": "mnli-devsplit", "hans_accuracy": 0.5, "hans": by, "test_metric": 0.6 + 0.01 * seed}

    recs = [hans(s, "softmax", 0.10) for s in (1, 2, 3)] + [hans(s, "SesameBERT", 0.10 + 0.05 * s) for s in (1, 2, 3)]
    md = sesame.render_hans(recs)
    # the validation part chose the epoch; the test part (61, 62, 63) is shown beside it
    assert "| softmax | 1,2,3 | 70.0 ± 0.0 | 62.0 ± 1.0 | 50.0 ± 0.0 |" in md
    # a seed without its test part (an older record) leaves the column empty rather than averaging the others
    recs[0] = {k: v for k, v in recs[0].items() if k != "test_metric"}
    assert "| softmax | 1,2,3 | 70.0 ± 0.0 | — | 50.0 ± 0.0 |" in sesame.render_hans(recs)
    # +5, +10, +15 points: beyond two standard errors, but t = 3.5 < 4.30 (2 degrees of freedom); the interval
    # [-2.4, +22.4] rules out no gain and no parity: undecided
    assert ("SesameBERT − softmax (paired, seeds ahead, t, p): +10.0 ± 5.0 [-2.4, +22.4] (3/3, t=3.5, p=0.07): **undecided**; "
            "2.0x softmax's accuracy") in md
    recs[3:] = [hans(s, "SesameBERT", 0.20 + 0.01 * s) for s in (1, 2, 3)]  # +11, +12, +13: t = 12 / (1 / sqrt 3)
    assert "+12.0 ± 1.0 [+9.5, +14.5] (3/3, t=20.8, p=0.002): **holds**" in sesame.render_hans(recs)
    # beside it, the same pairs on lexical-overlap entailment and on all of HANS (here unchanged: 0.9 and 0.5 everywhere)
    assert ("The same pairs on lexical-overlap entailment: +0.0 ± 0.0 [+0.0, +0.0] (0/3, t=—, p=1.00), level; "
            "on all of HANS: +0.0 ± 0.0 [+0.0, +0.0] (0/3, t=—, p=1.00), level") in sesame.render_hans(recs)


def test_faithfulness_table_lists_models_that_are_not_table2s_to_the_bit():
    from studies.faithfulness import faithfulness as mod

    ex = {e: {"aopc_comprehensiveness": 0.1, "aopc_sufficiency": 0.2} for e in ("attention", "rollout", "received", "grad_x_input", "integrated_gradients", "random")}

    def rec(method, seed, model, table2):
        return {"task": "sentube-auto", "method": method, "seed": seed, "examples": 3, "explanations": ex,
                "kendall_tau": {"attention vs integrated_gradients": 0.1}, "model_test_metric": model, "table2_test_metric": table2}

    md = mod.render([rec("softmax", 1, 0.70, 0.70), rec("SSAF", 1, 0.6645, 0.6656), rec("SSAF", 2, 0.5, None)])
    assert "| sentube-auto | SSAF | 1 | 66.5 | 66.6 |" in md
    assert "| sentube-auto | softmax | 1 |" not in md.split("not Table 2's model to the bit")[1]  # the same model: not listed
    assert "| sentube-auto | SSAF | 2 |" not in md.split("not Table 2's model to the bit")[1]  # no Table 2 record: nothing to compare


def test_faithfulness_table_pairs_by_seed_under_holm_and_reports_tie_shares():
    from studies.faithfulness import faithfulness as mod

    names = ("attention", "rollout", "received", "grad_x_input", "integrated_gradients", "random")

    def rec(method, seed, comp, tie=None):
        ex = {e: {"aopc_comprehensiveness": comp if e == "attention" else 0.1, "aopc_sufficiency": 0.2,
                  **({"tie_share": tie if e == "attention" else 0.0} if tie is not None else {})} for e in names}
        return {"task": "sst2-ptb", "method": method, "seed": seed, "examples": 3, "explanations": ex,
                "kendall_tau": {"attention vs integrated_gradients": 0.1}, **({"tie_draws": 5} if tie is not None else {})}

    # entmax15: +10, +11, +12 points of comprehensiveness (t = 19.1, p = 0.003); SSAF: 0, +4, +8 (t = 1.7)
    recs = [rec("softmax", s, 0.10) for s in (1, 2, 3)]
    recs += [rec("entmax15", s, 0.19 + 0.01 * s, tie=0.2 + 0.1 * s) for s in (1, 2, 3)]
    recs += [rec("SSAF", s, 0.06 + 0.04 * s) for s in (1, 2, 3)]
    md = mod.render(recs)
    row = lambda m: next(ln for ln in md.splitlines() if ln.startswith(f"| sst2-ptb | {m} − softmax") and "| attention |" in ln)  # noqa: E731
    assert "| +11.0 ± 1.0 [+8.5, +13.5] (3/3, t=19.1, p=0.003) | holds |" in row("entmax15")
    assert "| +4.0 ± 4.0 [-5.9, +13.9] (2/3, t=1.7, p=0.23) | undecided |" in row("SSAF")
    assert "Holm's correction across the methods compared with one baseline on one set" in md
    # tie shares: only the records made with random tie order have them; the older ones are flagged as positional
    ties = md.split("## Top-k slots decided by ties")[1].split("Kendall")[0]
    assert "| sst2-ptb | entmax15 | 1,2,3 | 40.0 ± 10.0 | 0.0 ± 0.0 |" in ties and "| SSAF |" not in ties
    assert "**Ties broken by position**: 6 of 9 records" in md
    fresh = mod.render([r for r in recs if r["method"] == "entmax15"])
    assert "Ties broken by position" not in fresh and "Tied words ordered at random" in fresh


def test_faithfulness_table_marks_positional_pairs_and_lists_the_verdicts_that_moved():
    """A pair with a record measured by positional ties is marked †; given the positional records, the comparisons now
    all tie-free are listed beside their old verdict, "moved" where it changed."""
    from studies.faithfulness import faithfulness as mod

    names = ("attention", "rollout", "received", "grad_x_input", "integrated_gradients", "random")

    def rec(method, seed, comp, fresh):
        ex = {e: {"aopc_comprehensiveness": comp if e == "attention" else 0.1, "aopc_sufficiency": 0.2,
                  **({"tie_share": 0.0} if fresh else {})} for e in names}
        return {"task": "sst2-ptb", "method": method, "seed": seed, "examples": 3, "explanations": ex,
                "kendall_tau": {"attention vs integrated_gradients": 0.1}, "model_test_metric": 0.5, **({"tie_draws": 5} if fresh else {})}

    old = [rec("softmax", s, 0.10, False) for s in (1, 2, 3)] + [rec("entmax15", s, 0.19 + 0.01 * s, False) for s in (1, 2, 3)]
    old += [rec("SSAF", s, 0.12 + 0.01 * s, False) for s in (1, 2, 3)]  # +3, +4, +5: holds
    # measured again without positional ties: entmax15 still +10..+12 (holds); SSAF's gain was word order: 0, +4, −2
    new = [rec("softmax", s, 0.10, True) for s in (1, 2, 3)] + [rec("entmax15", s, 0.19 + 0.01 * s, True) for s in (1, 2, 3)]
    new += [rec("SSAF", s, {1: 0.10, 2: 0.14, 3: 0.08}[s], True) for s in (1, 2, 3)]
    md = mod.render(new, old)
    moved = md.split("## Did a verdict move without positional ties?")[1].split("##")[0]
    assert "| sst2-ptb | entmax15 | attention | comprehensiveness | same | +11.0 (t=19.1) holds | +11.0 (t=19.1) holds | same |" in moved
    assert ("| sst2-ptb | SSAF | attention | comprehensiveness | same | +4.0 (t=6.9) holds | +0.7 (t=0.4) undecided "
            "| **moved** |") in moved
    # a model trained again (its test metric differs) is named: a move there is not the ties' alone
    for r in new[6:]:
        r["model_test_metric"] = 0.5 + (r["seed"] == 2) * 0.01
    moved = mod.render(new, old).split("## Did a verdict move without positional ties?")[1].split("##")[0]
    assert "| sst2-ptb | SSAF | attention | comprehensiveness | trained again |" in moved
    assert "| sst2-ptb | entmax15 | attention | comprehensiveness | same |" in moved
    assert "†" not in md  # every pair tie-free
    # half re-measured: SSAF's records still positional -> its pairs marked and left out of the moved table
    half = new[:6] + old[6:]
    md = mod.render(half, old)
    assert "| sst2-ptb | SSAF − softmax (1,2,3) † | attention |" in md and "at least one of the pair's records" in md
    assert "| sst2-ptb | SSAF | attention |" not in md.split("## Did a verdict move")[1].split("##")[0]
    assert "## Did a verdict move" not in mod.render(new)  # no positional records given: no section


def test_the_last_layer_recipe_is_a_holm_family_of_its_own():
    """1.5-entmax in the last layer only answers issue 37's question: adding its comparison leaves the maps' Holm
    family (and so their verdicts) as it was."""
    from studies.faithfulness import faithfulness as mod

    names = ("attention", "rollout", "received", "grad_x_input", "integrated_gradients", "random")

    def rec(method, seed, comp):
        ex = {e: {"aopc_comprehensiveness": comp if e == "attention" else 0.1, "aopc_sufficiency": 0.2, "tie_share": 0.0} for e in names}
        return {"task": "sst2-ptb", "method": method, "seed": seed, "examples": 3, "explanations": ex, "tie_draws": 5,
                "kendall_tau": {"attention vs integrated_gradients": 0.1}}

    # entmax15 +10, +20, +15 (t = 5.2, p = 0.035): holds alone, but not as the first of a family of two (0.035 > 0.05 / 2)
    maps = [rec("softmax", s, 0.10) for s in (1, 2, 3)] + [rec("entmax15", s, {1: 0.20, 2: 0.30, 3: 0.25}[s]) for s in (1, 2, 3)]
    last = [rec("entmax15-last", s, 0.10 + 0.01 * s) for s in (1, 2, 3)]  # +1, +2, +3: p = 0.07
    row = lambda md: next(ln for ln in md.splitlines() if ln.startswith("| sst2-ptb | entmax15 − softmax") and "| attention |" in ln)  # noqa: E731
    alone, beside = row(mod.render(maps)), row(mod.render(maps + last))
    assert alone == beside and "| holds |" in alone
    assert mod.family("sst2-ptb", "softmax", "attention", "comp", "entmax15-last") != mod.family("sst2-ptb", "softmax", "attention", "comp", "SSAF")
    assert mod.family("sst2-ptb", "softmax", "attention", "comp", "entmax15") == mod.family("sst2-ptb", "softmax", "attention", "comp", "SSAF")


def test_the_rationale_section_pairs_the_support_with_each_ranking_at_its_length_by_seed():
    """The support of entmax15-last's last layer as a rationale against softmax's attention, gradient x input and
    integrated gradients at the same length: paired by seed, better-is-positive, a flipped sign flips the verdict."""
    from studies.faithfulness import faithfulness as mod

    def part(comp, f1):
        rows = {e: {"comprehensiveness": comp if e == "attention" else 0.10, "sufficiency": 0.05, "tie_share": 0.0,
                    "token_f1": f1 if e == "attention" else 0.40, "iou": 0.3}
                for e in ("attention", "grad_x_input", "integrated_gradients", "random")}
        return {"lengths_from": "own support", "texts": 3, "mean_words": 4.0, "mean_share": 0.4, "lengths": [4, 4, 4], "explanations": rows}

    def rec(seed, gain):
        # the support: comprehensiveness 0.10 + gain, token F1 0.40 + gain; softmax's attention at its lengths: 0.10, 0.40
        return {"task": "sst2-ptb", "method": "entmax15-last", "seed": seed, "examples": 3, "rationale": part(0.10 + gain, 0.40 + gain),
                "softmax_rationale": part(0.10, 0.40), "machine": "x86_64, 2 cores", "torch_threads": 1}

    gains = {1: 0.10, 2: 0.20, 3: 0.15, 4: 0.12}
    md = mod.render([], None, [rec(s, g) for s, g in gains.items()])
    assert "## Attention support as a rationale" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| sst2-ptb | entmax15-last support − softmax attention (1,2,3,4)"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[3].startswith("+14.2 ± 4.3") and cells[4] == "holds"  # comprehensiveness, points
    assert cells[5].startswith("+0.0") and cells[6] == "level" and cells[7].startswith("+14.") and cells[8] == "holds"  # sufficiency equal; token F1
    assert "| sst2-ptb | entmax15-last | 1,2,3,4 | 3 | 4.0 ± 0.0 (40.0 ± 0.0%) | entmax15-last support | 24.2 ± 4.3 |" in md
    flipped = mod.render([], None, [rec(s, -g) for s, g in gains.items()])
    row = next(ln for ln in flipped.splitlines() if "support − softmax attention" in ln)
    assert [c.strip() for c in row.split("|")][4] == "reversed"


def test_a_glue_set_shows_its_own_metric_and_a_budget_other_than_the_papers_is_its_own_row(t2):
    def rec(method, seed, acc, mcc, budget=None):
        r = {"task": "cola", "method": method, "seed": seed, "lam": None, "epochs": 3, "lr": 3e-5, "train_size": 7696,
             "dev_accuracy": acc, "test_accuracy": acc, "test_mcc": mcc, "train_seconds": 60.0, "machine": "x86_64, 2 cores"}
        return r | ({"budget": budget} if budget else {})

    recs = [rec("softmax", s, 0.72, 0.26) for s in (1, 2, 3)] + [rec("entmax15-last", s, 0.70 + 0.001 * s, 0.17) for s in (1, 2, 3)]
    recs += [rec(m, s, 0.691, 0.0, "defaults") for m in ("softmax", "entmax15-last") for s in (1, 2, 3)]
    md = t2.render(recs, {})
    assert "| cola | softmax | — | 3 | 3e-05 | 7696 | 1,2,3 | 72.0 ± 0.0 | 72.0 ± 0.0 | MCC 26.0 ± 0.0 |" in md
    assert "| cola (defaults) | entmax15-last | — | 3 | 3e-05 | 7696 | 1,2,3 | 69.1 ± 0.0 | 69.1 ± 0.0 | MCC 0.0 ± 0.0 |" in md
    # each budget pairs with its own softmax: the paper budget's recipe is 1.8 points behind, the defaults' level
    row = next(ln for ln in md.splitlines() if ln.startswith("| cola | entmax15-last | 1,2,3 |"))
    assert "-1.8 ± 0.1" in row and "| reversed |" in row
    row = next(ln for ln in md.splitlines() if ln.startswith("| cola (defaults) | entmax15-last | 1,2,3 |"))
    assert "+0.0 ± 0.0" in row and "| level |" in row
