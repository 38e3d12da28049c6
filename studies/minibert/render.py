"""Tables 2-4 and Figure 2 of the MiniBERT study from its records (``results/records.json``), with verdicts.

:func:`render` is the table (``results/minibert_study.md``, registered in ``studies/tables.py``: it re-renders byte
for byte from the committed records); :func:`render_all` writes it, the same text into the block between
``<!-- tables:begin -->`` and ``<!-- tables:end -->`` of ``studies/minibert/README.md``, and the figure
``results/figure2.png``. ``python -m studies.minibert.study --render`` calls it; nothing is run.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from studies.stats import MARGIN, format_paired, paired_test, rule_text, verdicts_by_family

HERE = Path(__file__).resolve().parent

README = HERE / "README.md"
TABLE = HERE / "results" / "minibert_study.md"
FIGURE = HERE / "results" / "figure2.png"
BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"
KIND_NAMES = {"sa": "MiniSA", "ssa": "MiniSSA", "nta": "MiniNTA"}
TASK_NAMES = {"semeval2013": "SemEval-2013", "sentube-auto": "SenTube-A", "sentube-tablets": "SenTube-T",
              "rotten-tomatoes": "Rotten Tomatoes"}
TASKS = list(TASK_NAMES)
ATT_NAMES = {"softmax": "", "taylor": " + Taylor", "entmax15": " + 1.5-entmax"}


def cells(records) -> dict[tuple, dict[int, dict]]:
    out: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in records:
        out[(r["task"], r["kind"], r["mode"], r["layers"], r["heads"], r["head_mode"], r["attention"], r["score_scale"])][r["seed"]] = r
    return out


def cell_key(task, kind="sa", mode="mlm", L=1, H=1, hm="split", att="softmax", scale="none"):
    return (task, kind, mode, L, H, hm, att, scale)


def ms(xs, scale=100.0, nd=1) -> str:
    xs = [scale * x for x in xs]
    if not xs:
        return "—"
    sd = statistics.stdev(xs) if len(xs) > 1 else float("nan")
    return f"{statistics.mean(xs):.{nd}f} ± {sd:.{nd}f}" if len(xs) > 1 else f"{xs[0]:.{nd}f}"


def get(cell: dict[int, dict], field: str, scale: float = 100.0):
    return [scale * _field(r, field) for _, r in sorted(cell.items())]


def _field(r: dict, field: str) -> float:
    x = r
    for part in field.split("."):
        x = x[part]
    return float(x)


def paired(a: dict[int, dict], b: dict[int, dict], field: str = "test", scale: float = 100.0):
    """Test of a − b over the seeds both cells have (a margin of 1 point where the field is in points, × 100;
    none for the raw shape measures)."""
    seeds = sorted(set(a) & set(b))
    margin = MARGIN if scale == 100.0 else None
    return paired_test([scale * (_field(a[s], field) - _field(b[s], field)) for s in seeds], margin=margin), seeds


def budget_line(records) -> str:
    r = records[0]
    return (f"Budget: MLM {r['mlm_epochs'] if r['mode'] != 'scratch' else next((x['mlm_epochs'] for x in records if x['mode'] != 'scratch'), '—'):g} "
            f"epochs, fine-tuning {r['epochs']:g} epochs (best dev epoch kept), both AdamW at lr {r['lr']:g}, batch "
            f"{r['batch_size']}, max length {r['max_length']}; d = {r['dim']}, WordPiece vocabulary {r['vocab_size']} from "
            f"each set's training text; texts lemmatised ({r['lemmatize']}); one torch thread per run.")


def table23(C, tasks) -> list[str]:
    lines = ["| set | model | mode | seeds | dev | test | majority (dev / test) | parameters (trainable) |",
             "|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        for kind in KIND_NAMES:
            for mode in ("mlm", "scratch", "frozen"):
                c = C.get(cell_key(task, kind, mode))
                if not c:
                    lines.append(f"| {TASK_NAMES[task]} | {KIND_NAMES[kind]} | {mode} | 0 | not run | | | |")
                    continue
                r = next(iter(c.values()))
                maj = r["majority"]
                params = f"{r['parameters']:,}" + (f" ({r['trainable']:,})" if r["trainable"] != r["parameters"] else "")
                lines.append(f"| {TASK_NAMES[task]} | {KIND_NAMES[kind]} | {mode} | {len(c)} | {ms(get(c, 'dev', 1))} | "
                             f"{ms(get(c, 'test', 1))} | {100 * maj['validation']:.1f} / {100 * maj['test']:.1f} | {params} |")
    return lines


def verdicts23(C, tasks) -> list[str]:
    lines = ["| set | comparison (test, points) | paper | measured (paired by seed) | verdict |", "|---|---|---|---|---|"]
    fam_tests, fam_keys, fam_rows = [], [], []
    for task in tasks:
        base = C.get(cell_key(task, "sa", "mlm"))
        for kind in ("ssa", "nta"):
            c = C.get(cell_key(task, kind, "mlm"))
            if base and c:
                t, _ = paired(c, base)
                fam_tests.append(t)
                fam_keys.append(task)
                fam_rows.append((task, f"{KIND_NAMES[kind]} − MiniSA (mlm)", "on par (Table 2: within 0.01)"))
    for (task, what, paper), t in zip(fam_rows, verdicts_by_family(fam_tests, fam_keys) if fam_tests else []):
        lines.append(f"| {TASK_NAMES[task]} | {what} | {paper} | {format_paired(t, verdict=False, won=True)} | {t.verdict} (Holm) |")
    for task in tasks:
        for kind in KIND_NAMES:
            mlm = C.get(cell_key(task, kind, "mlm"))
            for mode, paper in (("scratch", "scratch ≥ mlm (Table 3: equal)"), ("frozen", "frozen far below (Table 3: −0.12 to −0.24)")):
                c = C.get(cell_key(task, kind, mode))
                if mlm and c:
                    t, _ = paired(c, mlm)
                    lines.append(f"| {TASK_NAMES[task]} | {KIND_NAMES[kind]}: {mode} − mlm | {paper} | "
                                 f"{format_paired(t, verdict=False, won=True)} | {t.verdict} |")
    return lines


SHAPES = [(1, 1, "split"), (1, 2, "split"), (1, 2, "full"), (2, 1, "split")]


def shape_name(L, H, hm) -> str:
    return f"{L}x{H}" + (f" {hm}" if H > 1 else "")


def table4(C, tasks, scale="none") -> list[str]:
    lines = ["| set | L x H | attention parameters | seeds (mlm / scratch) | mlm: test | scratch: test | majority (test) | "
             "scratch − mlm (paired by seed) | verdict | the paper's collapse | scratch: this shape − 1x1 (paired by seed) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        for L, H, hm in SHAPES:
            mlm, scr = C.get(cell_key(task, "sa", "mlm", L, H, hm, scale=scale)), C.get(cell_key(task, "sa", "scratch", L, H, hm, scale=scale))
            one = C.get(cell_key(task, "sa", "scratch", scale=scale))
            vs1 = v1 = "—"
            if (L, H) != (1, 1) and scr and one:
                t1, _ = paired(scr, one)
                vs1, v1 = format_paired(t1, verdict=False, won=True), t1.verdict
            if not mlm and not scr:
                continue
            r = next(iter((mlm or scr).values()))
            ap = next((x["attention_parameters"] for x in (mlm or {}).values() if x.get("attention_parameters")), None)
            test = verdict = collapse = "—"
            if mlm and scr:
                t, _ = paired(scr, mlm)
                test, verdict = format_paired(t, verdict=False, won=True), t.verdict
                collapse = {"reversed": "seen (scratch below mlm)", "too few seeds": "—"}.get(t.verdict, "not seen")
            lines.append(f"| {TASK_NAMES[task]} | {shape_name(L, H, hm)} | {f'{ap:,}' if ap is not None else '—'} | "
                         f"{len(mlm or {})} / {len(scr or {})} | {ms(get(mlm or {}, 'test', 1))} | {ms(get(scr or {}, 'test', 1))} | "
                         f"{100 * r['majority']['test']:.1f} | {test} | {verdict} | {collapse if (L, H) != (1, 1) else '(baseline shape)'} | {vs1} | {v1} |")
    return lines


FIG2 = [("sa", "softmax"), ("ssa", "softmax"), ("nta", "softmax"), ("nta", "taylor"), ("nta", "entmax15")]


def fig2_name(kind, att) -> str:
    return KIND_NAMES[kind] + ATT_NAMES[att]


def figure2_table(C, tasks) -> list[str]:
    lines = ["| set | model | seeds | entropy (nats) | diagonal mass | top mass | received: AOPC comp. | random: AOPC comp. | test |",
             "|---|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        for kind, att in FIG2:
            c = C.get(cell_key(task, kind, "mlm", att=att))
            if not c:
                continue
            faith = {s: r for s, r in c.items() if r.get("faithfulness")}
            lines.append(f"| {TASK_NAMES[task]} | {fig2_name(kind, att)} | {len(c)} | {ms(get(c, 'attention_shape.entropy', 1), 1, 2)} | "
                         f"{ms(get(c, 'attention_shape.diagonal', 1), 1, 2)} | {ms(get(c, 'attention_shape.top', 1), 1, 2)} | "
                         f"{ms(get(faith, 'faithfulness.received.aopc_comprehensiveness', 1), 1, 3)} | "
                         f"{ms(get(faith, 'faithfulness.random.aopc_comprehensiveness', 1), 1, 3)} | {ms(get(c, 'test', 1))} |")
    return lines


def figure2_verdicts(C, tasks) -> list[str]:
    lines = ["| set | claim (paper §5, Figure 2) | measured difference (paired by seed) | verdict |", "|---|---|---|---|"]
    claims = [
        ("MiniSSA less scattered than MiniSA: entropy(SA) − entropy(SSA)", ("sa", "softmax"), ("ssa", "softmax"), "attention_shape.entropy", 2),
        ("MiniNTA attends to itself more than MiniSA: diagonal(NTA) − diagonal(SA)", ("nta", "softmax"), ("sa", "softmax"), "attention_shape.diagonal", 3),
        ("Taylor more distributed: entropy(NTA + Taylor) − entropy(NTA)", ("nta", "taylor"), ("nta", "softmax"), "attention_shape.entropy", 2),
        ("Taylor still self-attending: diagonal(NTA + Taylor) − diagonal(SA)", ("nta", "taylor"), ("sa", "softmax"), "attention_shape.diagonal", 3),
        ("1.5-entmax: diagonal(NTA + 1.5-entmax) − diagonal(NTA)", ("nta", "entmax15"), ("nta", "softmax"), "attention_shape.diagonal", 3),
    ]
    for task in tasks:
        for text, (ka, aa), (kb, ab), field, nd in claims:
            a, b = C.get(cell_key(task, ka, "mlm", att=aa)), C.get(cell_key(task, kb, "mlm", att=ab))
            if not (a and b):
                continue
            t, _ = paired(a, b, field, 1.0)
            lines.append(f"| {TASK_NAMES[task]} | {text} | {format_paired(t, digits=nd, verdict=False, won=True)} | {t.verdict} |")
        for kind, att in FIG2:
            c = C.get(cell_key(task, kind, "mlm", att=att))
            faith = {s: r for s, r in (c or {}).items() if r.get("faithfulness")}
            if len(faith) < 1:
                continue
            diffs = [r["faithfulness"]["received"]["aopc_comprehensiveness"] - r["faithfulness"]["random"]["aopc_comprehensiveness"]
                     for _, r in sorted(faith.items())]
            t = paired_test(diffs, margin=None)  # raw AOPC (0-1): no margin in points
            lines.append(f"| {TASK_NAMES[task]} | {fig2_name(kind, att)}: received attention more faithful than random "
                         f"(AOPC comp. received − random) | {format_paired(t, digits=3, verdict=False, won=True)} | {t.verdict} |")
    return lines


def figure_examples(C, task="semeval2013") -> list:
    examples = []
    for kind, att in FIG2:
        c = C.get(cell_key(task, kind, "mlm", att=att)) or {}
        ex = next((r["attention_shape"].get("example") for _, r in sorted(c.items()) if r["attention_shape"].get("example")), None)
        if ex:
            examples.append((fig2_name(kind, att), ex))
    return examples


def draw_figure(C, task="semeval2013") -> bool:
    examples = figure_examples(C, task)
    if not examples:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(examples), figsize=(4.2 * len(examples), 4.4))
    axes = [axes] if len(examples) == 1 else axes
    for ax, (name, ex) in zip(axes, examples):
        ax.imshow(ex["matrix"], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(ex["tokens"])), ex["tokens"], rotation=90, fontsize=7)
        ax.set_yticks(range(len(ex["tokens"])), ex["tokens"], fontsize=7)
        ax.set_title(name, fontsize=9)
    fig.suptitle(f"{TASK_NAMES[task]}, first test text of 8-14 tokens, seed 1 (MLM + fine-tuning); rows: queries", fontsize=9)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True


def render(records) -> str:
    """The study's tables as markdown (pure: the same records give the same bytes)."""
    C = cells(records)
    tasks = [t for t in TASKS if any(r["task"] == t for r in records)]
    out = [budget_line(records), "",
           "Scores: micro-F1 (= accuracy) in %, mean ± sd over seeds; dev = the best epoch's dev score (the kept "
           "checkpoint), test = that checkpoint on test. Majority = the rate of the training split's most frequent "
           "label on dev / test (what a constant classifier scores).", "",
           rule_text(family="MiniSSA and MiniNTA against MiniSA within a set (Table 2's rows)"), "",
           "## Tables 2-3: MiniSA / MiniSSA / MiniNTA, 1 layer x 1 head, with MLM, from scratch, frozen", ""]
    out += table23(C, tasks)
    out += ["", "### Verdicts (test)", ""] + verdicts23(C, tasks)
    out += ["", "## Table 4: MiniSA with L layers x H heads, MLM or from scratch (scores unscaled, as the paper writes them)", "",
            "`split`: H heads of d/H (BERT's, no output projection: 1x2 has the parameters of 1x1); `full`: H heads of "
            "width d and an output projection back to d. The paper's claim: without MLM, 1x2 and 2x1 collapse "
            "(0.40 / 0.48 against 0.82 on its Task 1, 0.36 / 0.39 against 0.57-0.60 on Task 2): scratch − mlm far below 0, "
            "and far below the 1x1 model trained from scratch (0.83 / 0.63). The collapse is called seen where scratch − mlm "
            "is reversed.", ""]
    out += table4(C, tasks, "none")
    if any(r["score_scale"] == "sqrt" for r in records):
        out += ["", "### The same with scores scaled by 1/sqrt(d_head) (the authors' package)", ""] + table4(C, tasks, "sqrt")
    out += ["", "## Figure 2 measured: the attention's shape on the test texts (MLM + fine-tuning, 1x1)", "",
            "Rows of the real word-piece queries ([CLS]/[SEP] rows left out), keys every real token. entropy: mean "
            "row entropy in nats; diagonal: mean mass a token puts on itself; top: mean mass on its largest key. "
            "Faithfulness: `attnkit faithfulness`'s measures on the first 200 test texts (as the lemmas the model "
            "reads): AOPC comprehensiveness of the words ranked by the attention they receive, and of a random ranking "
            "(higher: removing those words changes the prediction more).", ""]
    out += figure2_table(C, tasks)
    out += ["", "### Verdicts", ""] + figure2_verdicts(C, tasks)
    if figure_examples(C):
        out += ["", "Figure 2 measured (one SemEval-2013 test sentence per model, seed 1): `results/figure2.png`."]
    out += ["", f"Records: `{len(records)}` runs in `results/records.json` (one per run, with its settings, scores, "
                "majority rate, attention-shape numbers and provenance)."]
    return "\n".join(out) + "\n"


def render_all(records) -> None:
    text = render(records)
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)
    readme = README.read_text() if README.is_file() else f"# MiniBERT study\n\n{BEGIN}\n{END}\n"
    if BEGIN not in readme or END not in readme:
        readme += f"\n{BEGIN}\n{END}\n"
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(head + BEGIN + "\n" + text.replace("`results/figure2.png`", "![Figure 2 measured](results/figure2.png)") + END + tail)
    drew = draw_figure(cells(records))
    print(f"written {TABLE}, {README}" + (f", {FIGURE}" if drew else ""))
