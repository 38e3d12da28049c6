"""MiniBERT at the paper's protocol: Tables 2-4 and Figure 2 of paper 004, with verdicts.

One record per run (a fine-tuning run, with the MLM pre-training it starts from) is appended to
``studies/minibert/results/records.json`` as the run lands, and that file is committed every few minutes, so an
interrupted study keeps what it measured. Runs whose record exists are skipped; run folders (``--work-dir``) are
reused, so a rerun of the same command resumes.

Protocol (the paper's, where it says): texts lemmatised (``--lemmatize en``; the paper lemmatised its French tweets),
WordPiece vocabulary and MLM on each task's training text only, the paper's architecture (1 layer x 1 head, d = 32,
fixed sinusoidal positions, no dropout, no residual, scores unscaled: ``--score-scale none``), micro-F1 (= accuracy for
single-label classification), the dev split the set ships with for model selection (all four sets here have one, so
the paper's 20%-of-train split is never needed), the best dev epoch kept and scored on test.

Modes: ``mlm`` (MLM pre-training, then fine-tuning), ``scratch`` (no MLM: ``--model mini``), ``frozen`` (the MLM model
fine-tuned with embeddings and attention frozen). Table 4 shapes (L x H) of MiniSA: 1x1, 1x2 in both head modes
(``split``: d/H-wide heads as BERT, ``full``: d-wide heads and an output projection), 2x1.

Each record also carries the attention-shape numbers of Figure 2, measured on the test texts (rows of the real
word-piece queries, [CLS]/[SEP] rows left out; keys: every real token): mean row entropy (nats), the mass a token puts
on itself (diagonal), the mass on its top key; and, for the Figure 2 runs (1x1, mlm), the faithfulness of the
attention each word receives (``attnkit faithfulness``'s measures on the first 200 test texts, as lemmas: AOPC
comprehensiveness of the ``received`` ranking against ``random``).

    OMP_NUM_THREADS=1 nohup python -m studies.minibert.study --data-dir ../shared/data > /tmp/minibert_runs.log 2>&1 &
    python -m studies.minibert.study --render     # tables into studies/minibert/README.md's marked block
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RECORDS = HERE / "results" / "records.json"
KIND_NAMES = {"sa": "MiniSA", "ssa": "MiniSSA", "nta": "MiniNTA"}
FIRST = ["semeval2013", "sentube-auto"]  # the sets whose cells land first
LATER = ["sentube-tablets", "rotten-tomatoes"]
SHAPES = [(1, 1, "split"), (1, 2, "split"), (1, 2, "full"), (2, 1, "split")]
FIG2 = [("sa", "softmax"), ("ssa", "softmax"), ("nta", "softmax"), ("nta", "taylor"), ("nta", "entmax15")]


def job(task, kind="sa", mode="mlm", seed=1, layers=1, heads=1, head_mode="split", attention="softmax", scale="none"):
    return {"task": task, "kind": kind, "mode": mode, "seed": seed, "layers": layers, "heads": heads,
            "head_mode": head_mode, "attention": attention, "score_scale": scale}


def key(r: dict) -> tuple:
    return tuple(r[k] for k in ("task", "kind", "mode", "seed", "layers", "heads", "head_mode", "attention", "score_scale"))


def plan(seeds) -> list[dict]:
    """Every run of the study, the most important first: on SemEval-2013, then SenTube-A, Table 4's collapse claim
    (MiniSA in four shapes, MLM and from scratch) and Table 2-3's MiniSSA/MiniNTA with and without MLM; then Figure 2's
    extra normalisers, the frozen rows, the other two sets, and last the sqrt-scaled Table 4 on SemEval-2013."""
    jobs = []
    for task in FIRST:
        for L, H, hm in SHAPES:  # Table 4 (and the 1x1 MiniSA cells of Tables 2-3)
            jobs += [job(task, "sa", m, s, L, H, hm) for s in seeds for m in ("mlm", "scratch")]
        jobs += [job(task, k, m, s) for k in ("ssa", "nta") for s in seeds for m in ("mlm", "scratch")]  # Tables 2-3
    for task in FIRST:  # Figure 2: Taylor-softmax and 1.5-entmax on MiniNTA, as the MLM models
        jobs += [job(task, k, "mlm", s, attention=att) for k, att in FIG2 if att != "softmax" for s in seeds]
        jobs += [job(task, k, "frozen", s) for k in ("sa", "ssa", "nta") for s in seeds]  # Table 3's frozen rows
    for task in LATER:
        jobs += [job(task, k, m, s) for k in ("sa", "ssa", "nta") for s in seeds for m in ("mlm", "scratch", "frozen")]
    for task in LATER:
        for L, H, hm in SHAPES[1:]:
            jobs += [job(task, "sa", m, s, L, H, hm) for s in seeds for m in ("mlm", "scratch")]
    for L, H, hm in SHAPES:  # does the scaling decide the collapse? (the authors' package scales by 1/sqrt(d))
        jobs += [job("semeval2013", "sa", m, s, L, H, hm, scale="sqrt") for s in seeds for m in ("mlm", "scratch")]
    seen, out = set(), []
    for j in jobs:
        if key(j) not in seen:
            seen.add(key(j))
            out.append(j)
    return out


def is_fig2(j: dict) -> bool:
    return j["layers"] == 1 and j["heads"] == 1 and j["mode"] == "mlm" and j["score_scale"] == "none" \
        and (j["kind"], j["attention"]) in FIG2 and j["task"] in FIRST


# ----------------------------------------------------------------------------- runs


def tag(j: dict) -> str:
    hm = "" if j["heads"] == 1 else j["head_mode"]
    return f"{j['task']}__{j['kind']}{j['layers']}x{j['heads']}{hm}_{j['attention']}_{j['score_scale']}__s{j['seed']}"


def run_pretrain(j: dict, a) -> dict:
    from attnkit.training.pretrain import PretrainConfig, pretrain

    out = Path(a.work_dir) / f"{tag(j)}__pre"
    cfg = PretrainConfig(task=j["task"], data_dir=a.data_dir, kind=j["kind"], attention=j["attention"], layers=j["layers"],
                         heads=j["heads"], dim=a.dim, vocab_size=a.vocab_size, epochs=a.mlm_epochs, batch_size=a.batch_size,
                         lr=a.lr, max_length=a.max_length, seed=j["seed"], output_dir=str(out), logging_steps=10**9,
                         lemmatize=a.lemmatize, score_scale=j["score_scale"], head_mode=j["head_mode"])
    t = time.time()
    m = pretrain(cfg)
    m.setdefault("wall_seconds", time.time() - t)
    return m


def run_finetune(j: dict, a) -> tuple[dict, dict | None]:
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = Path(a.work_dir) / f"{tag(j)}__{j['mode']}"
    common = dict(task=j["task"], data_dir=a.data_dir, attention=j["attention"], lam=0.0, epochs=a.epochs,
                  batch_size=a.batch_size, lr=a.lr, max_length=a.max_length, seed=j["seed"], output_dir=str(out),
                  logging_steps=10**9)
    pre = None
    if j["mode"] == "scratch":
        cfg = TrainConfig(model="mini", kind=j["kind"], layers=j["layers"], heads=j["heads"], dim=a.dim,
                          vocab_size=a.vocab_size, lemmatize=a.lemmatize, score_scale=j["score_scale"],
                          head_mode=j["head_mode"], **common)
    else:
        pre = run_pretrain(j, a)
        cfg = TrainConfig(model=pre["model_dir"], freeze="embeddings,attention" if j["mode"] == "frozen" else None, **common)
    t = time.time()
    m = train(cfg)
    m.setdefault("wall_seconds", time.time() - t)
    return m, pre


def majority(task: str, data_dir) -> dict:
    """The training split's most frequent label and its rate on dev and test (what a constant classifier scores)."""
    from attnkit.tasks import load_task

    d = load_task(task, data_dir)
    label = Counter(d.splits["train"]["label"]).most_common(1)[0][0]
    out = {"label": label}
    for split in ("validation", "test"):
        ys = list(d.splits[split]["label"])
        out[split] = sum(y == label for y in ys) / len(ys)
    return out


def attention_shape(model_dir: str, task: str, data_dir, lemmatize: str | None, max_length: int, keep_example: bool) -> dict:
    """Figure 2's numbers on the test texts: mean row entropy, diagonal mass, top mass (rows of real, non-special
    query tokens; every layer and head pooled); with ``keep_example`` also one sentence's matrix (first layer/head)."""
    import torch

    from attnkit.models.checkpoint import load_classifier, load_tokenizer
    from attnkit.tasks import load_task
    from attnkit.tasks.lemmas import lemmatizer

    model = load_classifier(model_dir).eval()
    tok = load_tokenizer(model_dir)
    texts = list(load_task(task, data_dir).splits["test"]["text"])
    if lemmatize:
        lem = lemmatizer(lemmatize)
        texts = [lem(t) for t in texts]
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    ent = diag = top = 0.0
    rows = 0
    example = None
    with torch.no_grad():
        for i in range(0, len(texts), 128):
            enc = tok(texts[i:i + 128], truncation=True, max_length=max_length, padding=True, return_tensors="pt")
            att = model(**enc, output_attentions=True).attentions  # L x [B, H, T, T]
            q = enc["attention_mask"].bool() & ~torch.isin(enc["input_ids"], special)  # [B, T] real word pieces
            for A in att:
                A = A.float()
                p = A.clamp_min(1e-12)
                e = -(A * p.log()).sum(-1)  # [B, H, T]
                d = torch.diagonal(A, dim1=-2, dim2=-1)  # [B, H, T]
                t = A.max(-1).values
                m = q[:, None, :].expand_as(e)
                ent += e[m].sum().item()
                diag += d[m].sum().item()
                top += t[m].sum().item()
                rows += int(m.sum())
            if keep_example and example is None:
                for b in range(enc["input_ids"].shape[0]):
                    n = int(enc["attention_mask"][b].sum())
                    if 8 <= n <= 14:
                        example = {"tokens": tok.convert_ids_to_tokens(enc["input_ids"][b, :n].tolist()),
                                   "matrix": [[round(float(x), 4) for x in row] for row in att[0][b, 0, :n, :n]]}
                        break
    out = {"entropy": ent / rows, "diagonal": diag / rows, "top": top / rows, "rows": rows}
    if example is not None:
        out["example"] = example
    return out


def faithfulness(model_dir: str, task: str, a, out_json: Path) -> dict:
    """attnkit faithfulness's measures (``faithfulness_report``) on the first ``a.faith_examples`` test texts, given
    as the lemmas the model reads: the words ranked and removed are those lemmas (`attnkit faithfulness` itself
    refuses a lemma model, whose user's words are not what it reads)."""
    if not out_json.is_file():
        from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report
        from attnkit.models.checkpoint import load_classifier, load_tokenizer
        from attnkit.runfiles.atomic import write_json_atomic
        from attnkit.tasks import load_task
        from attnkit.tasks.lemmas import lemmatizer

        texts = list(load_task(task, a.data_dir).splits["test"]["text"])[: a.faith_examples]
        if a.lemmatize:
            lem = lemmatizer(a.lemmatize)
            texts = [lem(t) for t in texts]
        clf = WordClassifier(load_classifier(model_dir), load_tokenizer(model_dir), max_length=a.max_length, ig_steps=20)
        write_json_atomic(out_json, faithfulness_report(clf, texts, seed=0))
    f = json.loads(out_json.read_text())["explanations"]
    return {k: {"aopc_comprehensiveness": f[k]["aopc_comprehensiveness"], "aopc_sufficiency": f[k]["aopc_sufficiency"]}
            for k in ("received", "attention", "random", "integrated_gradients") if k in f} | {"examples": a.faith_examples}


# ----------------------------------------------------------------------------- records


def load_records(path: Path = RECORDS) -> list[dict]:
    return json.loads(path.read_text()) if path.is_file() else []


def save_records(records: list[dict], path: Path = RECORDS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    os.replace(tmp, path)


def commit(paths: list[Path], message: str) -> bool:
    rel = [str(p.relative_to(ROOT)) for p in paths]
    for _ in range(10):
        add = subprocess.run(["git", "add", "--", *rel], cwd=ROOT, capture_output=True, text=True)
        if add.returncode == 0:
            c = subprocess.run(["git", "commit", "-q", "-m", message, "--", *rel], cwd=ROOT, capture_output=True, text=True)
            if c.returncode == 0 or "nothing to commit" in c.stdout + c.stderr:
                return True
        time.sleep(3)  # another agent's git holds .git/index.lock
    print(f"[study] could not commit {rel}", flush=True)
    return False


def record(j: dict, m: dict, pre: dict | None, a, shape: dict, faith: dict | None, maj: dict, prov: dict) -> dict:
    r = dict(j)
    r.update({
        "epochs": a.epochs, "mlm_epochs": a.mlm_epochs if j["mode"] != "scratch" else 0, "lr": a.lr,
        "batch_size": a.batch_size, "max_length": a.max_length, "dim": a.dim, "vocab_size": a.vocab_size,
        "lemmatize": a.lemmatize,
        "dev": m["validation"]["accuracy"], "test": m["test"]["accuracy"],
        "dev_macro_f1": m["validation"].get("macro_f1"), "test_macro_f1": m["test"].get("macro_f1"),
        "majority": maj, "parameters": m.get("parameters"),
        "trainable": (m.get("frozen") or {}).get("trainable_parameters", m.get("parameters")),
        "mlm_loss": pre["mlm_loss"] if pre else None, "attention_parameters": pre.get("attention_parameters") if pre else None,
        "train_seconds": (m.get("train") or {}).get("train_runtime"), "pretrain_seconds": pre.get("seconds") if pre else None,
        "attention_shape": shape, "faithfulness": faith,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch_threads": 1, "provenance": prov,
    })
    return r


def run_all(a) -> None:
    import torch

    from studies.stats import provenance

    torch.set_num_threads(1)
    path = Path(a.records).resolve()
    records = load_records(path)
    done = {key(r) for r in records}
    majorities: dict[str, dict] = {}
    last_commit = time.time()
    todo = [j for j in plan(a.seeds) if key(j) not in done][: a.max_runs]
    print(f"[study] {len(todo)} runs to do ({len(done)} recorded)", flush=True)
    for n, j in enumerate(todo, 1):
        t0 = time.time()
        m, pre = run_finetune(j, a)
        model_dir = m["model_dir"]
        lem = a.lemmatize
        shape = attention_shape(model_dir, j["task"], a.data_dir, lem, a.max_length, keep_example=j["seed"] == a.seeds[0] and is_fig2(j))
        faith = faithfulness(model_dir, j["task"], a, Path(a.work_dir) / f"{tag(j)}__{j['mode']}" / "faithfulness.json") if is_fig2(j) else None
        if j["task"] not in majorities:
            majorities[j["task"]] = majority(j["task"], a.data_dir)
        records.append(record(j, m, pre, a, shape, faith, majorities[j["task"]], provenance(ROOT)))
        save_records(records, path)
        files = rendered(records, path)  # the table follows the records at once: the tree's table always matches them
        print(f"[study] {n}/{len(todo)} {tag(j)} {j['mode']}: dev {m['validation']['accuracy']:.4f} test "
              f"{m['test']['accuracy']:.4f} ({time.time() - t0:.0f}s)", flush=True)
        if a.commit and time.time() - last_commit > a.commit_every:
            commit(files, f"studies/minibert: {len(records)} run records, tables re-rendered (issue 39)")
            last_commit = time.time()
    if a.commit:
        commit(rendered(records, path), f"studies/minibert: {len(records)} run records{', the plan done' if a.max_runs is None else ''}, "
                                        "tables re-rendered (issue 39)")


def rendered(records: list[dict], path: Path) -> list[Path]:
    """The files to commit with the records: with the study's own records file, its tables re-rendered from them too
    (so the committed table always matches the committed records); a failed render never stops the runs."""
    if path != RECORDS:
        return [path]
    try:
        import importlib

        from studies.minibert import render

        importlib.reload(render)  # a render.py edited while the study runs is the one used
        render.render_all(records)
        FIGURE, README, TABLE = render.FIGURE, render.README, render.TABLE
        return [p for p in (path, TABLE, README, FIGURE) if p.is_file()]
    except Exception as e:  # noqa: BLE001
        print(f"[study] tables not rendered: {e!r}", flush=True)
        return [path]


# ----------------------------------------------------------------------------- entry point


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--work-dir", default="runs/study_minibert")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=4000)
    ap.add_argument("--mlm-epochs", type=float, default=5)
    ap.add_argument("--epochs", type=float, default=4)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--lemmatize", default="en")
    ap.add_argument("--faith-examples", type=int, default=200)
    ap.add_argument("--commit-every", type=float, default=180, help="seconds between commits of the records")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: other jobs share the cores)")
    ap.add_argument("--records", default=str(RECORDS), help="the JSON list the records are appended to")
    ap.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    ap.add_argument("--no-commit", dest="commit", action="store_false", help="do not commit the records file")
    ap.add_argument("--render", action="store_true", help="write the tables from the records, running nothing")
    return ap


def main() -> None:
    a = parser().parse_args()
    if a.render:
        from studies.minibert.render import render_all

        render_all(load_records(Path(a.records)))
        return
    if a.threads != 1:
        raise SystemExit(f"--threads {a.threads}: this study runs with one thread (the cores are shared)")
    run_all(a)


if __name__ == "__main__":
    main()
