"""Faithful and as accurate as softmax? Adapting the encoder to 1.5-entmax before fine-tuning.

Every cell is a real run of the command line: ``attnkit adapt`` (continued MLM on the pooled *training* texts of the
five sentiment sets, alpha annealed 1.01 -> 1.5 over the first half of the steps; the softmax control on the same
texts, steps and schedule), then ``attnkit train`` at Table 2's budget (lr 2e-5, batch 16, the paper's epochs, max
length 128, length-grouped batches, SST-1 on 5,000 phrases), then the faithfulness measures of the fine-tuned model
on SST-2 and SenTube-A (``attnkit.analysis.faithfulness``: ERASER comprehensiveness / sufficiency of the [CLS]
attention, ties broken at random over 5 draws; plausibility against SST's word labels on SST-2).

Methods (one run folder each, per task and seed):

    softmax                     the plain swap's baseline: MiniLM fine-tuned with softmax
    entmax15                    the plain swap (Table 2's row, here on the same machine)
    entmax15-last               1.5-entmax in the last layer only, softmax in the others
    adapted-softmax             MiniLM adapted with softmax (the control), fine-tuned with softmax
    adapted-entmax15            MiniLM adapted to 1.5-entmax, fine-tuned with 1.5-entmax
    adapted-entmax15+distill    the same, learning also from the softmax model's predictions (weight 0.5, T 2)

A scheduler runs the jobs as subprocesses, ``--workers`` at a time, in priority order (whole seeds first), and
appends each finished cell's record to ``--json`` at once; a cell already there is skipped, so an interrupted study
resumes. ``--deadline`` stops launching jobs after that many seconds and ends the running ones before it ends.

    python -m studies.adapt.run --data-dir ../shared/data --bf16 --workers 14 --seeds 1 2 3     # on a GPU
    python -m studies.adapt.run --render-only                                                   # the tables
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from studies.stats import read_records  # records are read and replaced under one lock: studies.stats

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: the study's sets: where 1.5-entmax loses (SST-1, SST-2, SenTube-A) and SemEval-2013, in the order they are run
TASKS = ("sst2-ptb", "sentube-auto", "sst5-phrases", "semeval2013")
#: the sets whose test texts the faithfulness measures are taken on
FAITH_TASKS = ("sst2-ptb", "sentube-auto")
#: the texts the encoders are adapted on: the training splits of the five sentiment sets (SST's sentences once)
ADAPT_TASKS = ("sst5", "sst2-ptb", "semeval2013", "sentube-auto", "sentube-tablets")
#: Table 2's budget (benchmarks' ssaf_table2): lr, batch, length; epochs per task from the SSAF paper
LR, BATCH, MAX_LENGTH = 2e-5, 16, 128
EPOCHS = {"sst2-ptb": 4, "sst5-phrases": 4, "sentube-auto": 5, "sentube-tablets": 6, "semeval2013": 8}
SUBSET = {"sst5-phrases": 5000}
#: the command line, run by this Python (a lent GPU's venv may not put the ``attnkit`` script on PATH)
ATTNKIT = [sys.executable, "-m", "attnkit.cli"]
#: this module's per-cell measurements, run the same way (the repository root is on the jobs' PYTHONPATH)
SELF = [sys.executable, "-m", "studies.adapt.run"]


@dataclass(frozen=True)
class Method:
    attention: str
    adapt: str | None = None  # the map the encoder was adapted to (None: MiniLM as shipped)
    sparse_layers: str | None = None
    teacher: str | None = None  # the method whose model (same task and seed) is the teacher


METHODS = {
    "softmax": Method("softmax"),
    "entmax15": Method("entmax15"),
    "entmax15-last": Method("entmax15", sparse_layers="last"),
    "adapted-softmax": Method("softmax", adapt="softmax"),
    "adapted-entmax15": Method("entmax15", adapt="entmax15"),
    "adapted-entmax15+distill": Method("entmax15", adapt="entmax15", teacher="softmax"),
}
#: run order: the comparisons the answer rests on first
ORDER = ("softmax", "adapted-entmax15", "adapted-softmax", "entmax15-last", "adapted-entmax15+distill", "entmax15")
#: which runs come first where not all fit (a lent GPU's minutes): the three methods the answer rests on, on the sets
#: of the faithfulness table and SST-1; then the last-layer and distillation rows there; then SemEval-2013 (its
#: 8 epochs cost as much as the three other sets together); the plain swap (Table 2 has it) last
CORE = ("softmax", "adapted-entmax15", "adapted-softmax")


def tier(task: str, method: str) -> int:
    if method == "entmax15":
        return 5
    if task == "semeval2013":
        return 3 if method in CORE else 4
    return 1 if method in CORE else 2


@dataclass
class Job:
    key: tuple
    cmds: list[list[str]]
    deps: tuple = ()
    priority: tuple = ()
    run: Path | None = None
    env: dict = field(default_factory=dict)


def adapt_dir(a, attention: str, seed: int) -> Path:
    return Path(a.work_dir) / f"adapt__{attention}__s{seed}"


def run_dir(a, task: str, method: str, seed: int) -> Path:
    return Path(a.work_dir) / f"{task}__{method}__s{seed}"


def common(a) -> list[str]:
    return (["--data-dir", a.data_dir] if a.data_dir else []) + (["--bf16"] if a.bf16 else []) + ["--threads", "1"]


def adapt_job(a, attention: str, seed: int) -> Job:
    cmd = [*ATTNKIT, "adapt", *sum((["--task", t] for t in ADAPT_TASKS), []), "--model", a.model, "--attention", attention,
           "--max-steps", str(a.adapt_steps), "--batch-size", str(a.adapt_batch), "--max-length", str(MAX_LENGTH),
           "--anneal", str(a.anneal), "--seed", str(seed), "--output-dir", str(adapt_dir(a, attention, seed)),
           "--save-steps", str(max(a.adapt_steps // 2, 1)), *common(a)]
    if a.smoke:
        cmd += ["--max-train-samples", "64", "--batch-size", "4", "--head-warmup", "1", "--max-steps", "3", "--save-steps", "2"]
    return Job(("adapt", attention, seed), [cmd], priority=(0, seed), run=adapt_dir(a, attention, seed))


def train_job(a, task: str, method: str, seed: int) -> Job:
    m = METHODS[method]
    model = str(adapt_dir(a, m.adapt, seed)) if m.adapt else a.model
    run = run_dir(a, task, method, seed)
    cmd = [*ATTNKIT, "train", "--task", task, "--model", model, "--attention", m.attention, "--lr", str(LR),
           "--batch-size", str(BATCH), "--epochs", str(EPOCHS[task]), "--max-length", str(MAX_LENGTH), "--seed", str(seed),
           "--group-by-length", "--output-dir", str(run), "--no-heatmap", *common(a)]
    if task in SUBSET:
        cmd += ["--max-train-samples", str(SUBSET[task])]
    if m.sparse_layers:
        cmd += ["--sparse-layers", m.sparse_layers]
    deps = [("adapt", m.adapt, seed)] if m.adapt else []
    if m.teacher:
        cmd += ["--teacher", str(run_dir(a, task, m.teacher, seed))]
        deps.append(("train", task, m.teacher, seed))
    if a.smoke:
        cmd += ["--max-steps", "2", "--max-train-samples", "16", "--max-eval-samples", "16", "--batch-size", "4"]
    stats = [*SELF, "--cell-stats", str(run), task]
    if a.data_dir:
        stats += ["--data-dir", a.data_dir]
    cmds = [cmd, stats]
    if task in FAITH_TASKS and not a.no_faithfulness:
        faith = [*SELF, "--cell-faithfulness", str(run), task, str(seed),
                 "--max-examples", str(4 if a.smoke else a.max_examples), "--ig-steps", str(2 if a.smoke else a.ig_steps)]
        cmds.append(faith + (["--data-dir", a.data_dir] if a.data_dir else []))
    return Job(("train", task, method, seed), cmds, tuple(deps),
               priority=(tier(task, method), TASKS.index(task), seed, ORDER.index(method)), run=run)


# ----------------------------------------------------------------------------- per-cell measurements (subprocesses)


def cell_stats(run: Path, task: str, data_dir: str | None) -> None:
    """The mean non-zeros per attention row and the share of exact zeros, per layer, of the run's model on the first
    256 dev texts (as Table 2's records); written to <run>/cell_stats.json."""
    from attnkit.analysis.inference import load_for_inference
    from attnkit.runfiles.atomic import write_json_atomic
    from attnkit.tasks import load_task
    from attnkit.training.adapt import attention_zeros

    _, model, tok = load_for_inference(str(run))
    if next(model.parameters()).device.type == "cpu" and __import__("torch").cuda.is_available():
        model.cuda()
    texts = list(load_task(task, data_dir).splits["validation"]["text"])[:256]
    z = attention_zeros(model, tok, texts, MAX_LENGTH)
    write_json_atomic(run / "cell_stats.json", {"dev_texts": len(texts), **z})


def cell_faithfulness(run: Path, task: str, seed: int, data_dir: str | None, max_examples: int, ig_steps: int) -> None:
    """The faithfulness report of the run's model on the first ``max_examples`` test texts (ties at random, 5 draws);
    written to <run>/faithfulness.json."""
    import torch

    from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report
    from attnkit.analysis.inference import load_for_inference
    from attnkit.runfiles.atomic import write_json_atomic
    from attnkit.tasks import load_task
    from attnkit.tasks.sst import sst_rationales

    _, model, tok = load_for_inference(str(run))
    if torch.cuda.is_available():
        model.cuda()
    texts = list(load_task(task, data_dir).splits["test"]["text"])[:max_examples]
    rationales = [r for _, r in sst_rationales(data_dir, "test")][:max_examples] if task == "sst2-ptb" else None
    t0 = time.time()
    rep = faithfulness_report(WordClassifier(model, tok, max_length=MAX_LENGTH, ig_steps=ig_steps), texts,
                              rationales=rationales, seed=seed, tie_draws=5)
    write_json_atomic(run / "faithfulness.json", {"examples": len(texts), "ig_steps": ig_steps, "tie_draws": 5,
                                                  "seconds": round(time.time() - t0, 1), **rep})


# ----------------------------------------------------------------------------- records


def machine() -> str:
    s = f"{platform.machine()}, {os.cpu_count()} cores"
    try:
        import torch

        if torch.cuda.is_available():
            s += f", {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return s


def add_record(path: Path, rec: dict) -> None:
    from attnkit.runfiles.atomic import write_json_atomic
    from studies.stats import replace_record

    # a cell's record replaces its older one (under the records' lock); an adapted encoder made again on another
    # machine (a lent GPU keeps no files) is kept beside the earlier making, which the fine-tuning runs there used
    replace_record(path, rec, same_cell, order, write=write_json_atomic)


def order(r: dict) -> tuple:
    return (r["kind"], r.get("task", ""), r.get("method", r.get("attention", "")), r["seed"])


def same_cell(r: dict, rec: dict) -> bool:
    return key_of(r) == key_of(rec) and (rec["kind"] != "adapt" or r.get("machine") == rec.get("machine"))


def key_of(r: dict) -> tuple:
    return ("adapt", r["attention"], r["seed"]) if r["kind"] == "adapt" else ("train", r["task"], r["method"], r["seed"])


def provenance_now() -> dict:
    from studies.stats import provenance

    p = provenance()
    if p.get("git_commit") is None and os.environ.get("ATTNKIT_COMMIT"):  # a copy of the tree without .git (a lent GPU)
        p["git_commit"], p["git_dirty"] = os.environ["ATTNKIT_COMMIT"], os.environ.get("ATTNKIT_DIRTY") == "1"
    return p


def make_record(job: Job, a, seconds: float) -> dict:
    from studies.stats import sha256_file

    run = job.run
    m = json.loads((run / "metrics.json").read_text())
    base = {"seed": job.key[-1], "seconds": round(seconds, 1), "machine": machine(), "precision": "bf16" if a.bf16 else "fp32",
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "provenance": provenance_now(),
            "weights_file_sha256": sha256_file(run / "model" / "model.safetensors"), "smoke": bool(a.smoke)}
    if job.key[0] == "adapt":
        ad = m["adapted"]
        return {"kind": "adapt", "attention": job.key[1], **base,
                **{k: ad[k] for k in ("steps", "anneal_steps", "head_warmup_steps", "batch_size", "lr", "max_length",
                                      "mlm_loss", "schedule", "texts", "zero_share", "nonzeros_per_row", "seconds")
                   if k in ad}}
    _, task, method, seed = job.key
    meth = METHODS[method]
    main = m.get("main_metric", "accuracy")
    rec = {"kind": "train", "task": task, "method": method, **base, "attention": meth.attention,
           "sparse_layers": meth.sparse_layers, "adapted": meth.adapt, "teacher": meth.teacher,
           "epochs": EPOCHS[task], "lr": LR, "batch_size": BATCH, "max_length": MAX_LENGTH, "train_size": m.get("train_size"),
           "dev_accuracy": m["validation"].get("accuracy"), "test_accuracy": (m.get("test") or {}).get("accuracy"),
           "test_macro_f1": (m.get("test") or {}).get("macro_f1"), "main_metric": main,
           "train_seconds": (m.get("train") or {}).get("train_runtime")}
    if "adapted" in m:
        rec["adapt_settings"] = {k: m["adapted"].get(k) for k in ("steps", "anneal_steps", "head_warmup_steps", "schedule", "seed", "mlm_loss")}
        rec["adapt_settings"]["texts"] = m["adapted"].get("texts", {}).get("texts")
    if "teacher" in m:
        rec["distill"] = {k: m["teacher"][k] for k in ("weight", "temperature")}
    st = run / "cell_stats.json"
    if st.is_file():
        s = json.loads(st.read_text())
        rec["nonzeros_per_row"] = s["nonzeros_per_row"]
        rec["zero_share"] = s["zero_share"]
    fa = run / "faithfulness.json"
    if fa.is_file():
        rec["faithfulness"] = json.loads(fa.read_text())
    return rec


# ----------------------------------------------------------------------------- the scheduler


def plan(a) -> list[Job]:
    jobs = []
    adapts = {METHODS[m].adapt for m in a.methods if METHODS[m].adapt}
    for seed in a.seeds:
        for att in sorted(adapts):
            jobs.append(adapt_job(a, att, seed))
        for method in a.methods:
            for task in a.tasks:
                jobs.append(train_job(a, task, method, seed))
    # a teacher is run even where its own method was not asked for
    have = {j.key for j in jobs}
    for j in list(jobs):
        for d in j.deps:
            if d[0] == "train" and d not in have:
                jobs.append(train_job(a, d[1], d[2], d[3]))
                have.add(d)
    return jobs


def schedule(a) -> int:
    out = Path(a.json)
    done = {key_of(r) for r in read_records(out) if bool(r.get("smoke")) == bool(a.smoke)
            and not (a.remeasure and r["kind"] == "train" and r["task"] in FAITH_TASKS and "faithfulness" not in r)}
    planned = plan(a)
    # an adapted encoder recorded on another machine (a lent GPU's runs are not kept) is made again where a fine-tuning
    # run still needs it: same command and seed (its record keeps the weights' hash of each making)
    needed = {d for j in planned if j.key not in done for d in j.deps if d[0] == "adapt"}
    for j in planned:
        if j.key in needed and j.key in done and not (j.run / "model" / "model.safetensors").is_file():
            done.discard(j.key)
    jobs = [j for j in planned if j.key not in done]
    finished, failed = set(done), set()
    running: dict = {}  # key -> (Popen, job, t0, step index, log file)
    t_start = time.time()
    log_dir = Path(a.work_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))

    def say(msg: str) -> None:
        line = f"[{time.time() - t_start:7.1f}s] {msg}"
        print(line, flush=True)
        if a.log:
            with open(a.log, "a") as f:
                f.write(line + "\n")

    def start(job: Job, step: int) -> None:
        name = "__".join(map(str, job.key))
        logf = open(log_dir / f"{name}.log", "a")
        p = subprocess.Popen(job.cmds[step], stdout=logf, stderr=subprocess.STDOUT, env=env)
        running[job.key] = (p, job, running.get(job.key, (None, None, time.time()))[2], step, logf)
        if step == 0:
            say(f"start {name}: {shlex.join(job.cmds[0])}")

    def record(job: Job, t0: float, final: bool) -> None:
        name = "__".join(map(str, job.key))
        try:
            rec = make_record(job, a, time.time() - t0)
            add_record(out, rec)
            if final:
                brief = (f"test {rec['test_accuracy']:.4f}" if rec["kind"] == "train" else f"MLM loss {rec['mlm_loss']:.3f}")
                say(f"done {name} in {time.time() - t0:.0f}s: {brief}")
            if a.copy_to:
                Path(a.copy_to).mkdir(parents=True, exist_ok=True)
                (Path(a.copy_to) / out.name).write_text(out.read_text())
        except Exception as e:  # noqa: BLE001 - one bad record must not stop the study
            say(f"RECORD FAILED {name}: {type(e).__name__}: {e}")

    say(f"{len(jobs)} jobs ({len(done)} cells already recorded), {a.workers} workers, deadline {a.deadline}s")
    while jobs or running:
        for key, (p, job, t0, step, logf) in list(running.items()):
            rc = p.poll()
            if rc is None:
                continue
            logf.close()
            del running[key]
            name = "__".join(map(str, key))
            if rc != 0:
                if step == 0:
                    failed.add(key)
                    say(f"FAILED {name} (exit {rc}); see {log_dir / (name + '.log')}")
                else:  # the run itself finished and is recorded; a measurement after it failed
                    finished.add(key)
                    say(f"FAILED a measurement of {name} (step {step}, exit {rc}): the run's record stands without it; "
                        f"see {log_dir / (name + '.log')}")
                continue
            if step == 0:
                finished.add(key)  # what depends on the run (a teacher, an adapted encoder) may start now
            record(job, t0, final=step + 1 == len(job.cmds))
            if step + 1 < len(job.cmds):
                running[key] = (None, job, t0, step, None)
                start(job, step + 1)
        elapsed = time.time() - t_start
        if elapsed > a.deadline:
            for key, (p, job, t0, step, logf) in running.items():
                if p is not None:
                    p.kill()
                say(f"deadline: killed {'__'.join(map(str, key))} (step {step})")
            break
        blocked = [j for j in jobs if any(d in failed for d in j.deps)]
        for j in blocked:
            failed.add(j.key)
            jobs.remove(j)
            say(f"skip {'__'.join(map(str, j.key))}: a job it needs failed")
        ready = sorted((j for j in jobs if all(d in finished for d in j.deps)), key=lambda j: j.priority)
        while ready and len(running) < a.workers and elapsed < a.deadline - a.no_start_after:
            j = ready.pop(0)
            jobs.remove(j)
            start(j, 0)
        if not running and jobs and not ready:
            for j in jobs:
                say(f"skip {'__'.join(map(str, j.key))}: waits for a job that did not finish")
            break
        if not running and not ready and (elapsed >= a.deadline - a.no_start_after):
            break
        time.sleep(1.0)
    say(f"finished {len(finished) - len(done)} jobs, {len(failed)} failed, {len(jobs)} not started")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--methods", nargs="+", default=list(ORDER), choices=list(METHODS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--adapt-steps", type=int, default=2000)
    ap.add_argument("--adapt-batch", type=int, default=32)
    ap.add_argument("--anneal", type=float, default=0.5)
    ap.add_argument("--max-examples", type=int, default=200, help="faithfulness: the first N test texts (default 200)")
    ap.add_argument("--ig-steps", type=int, default=20)
    ap.add_argument("--no-faithfulness", action="store_true")
    ap.add_argument("--work-dir", default="runs/adapt_study")
    ap.add_argument("--json", default=str(HERE / "records.json"))
    ap.add_argument("--copy-to", default=None, help="also copy the records there after each cell (e.g. $OUT on a lent GPU)")
    ap.add_argument("--log", default=None)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds: kill what still runs then")
    ap.add_argument("--no-start-after", type=float, default=0.0, help="no job starts in the last this-many seconds before the deadline")
    ap.add_argument("--smoke", action="store_true", help="every run a few steps on a few texts (checks the plumbing; records marked smoke)")
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--remeasure", action="store_true",
                    help="train again (and replace the record of) each SST-2/SenTube-A cell recorded without its faithfulness "
                         "(its model was not kept): the faithfulness table needs every cell's own model")
    ap.add_argument("--record-only", action="store_true", help="record the finished runs in --work-dir that have no record yet")
    ap.add_argument("--cell-stats", nargs=2, metavar=("RUN", "TASK"))
    ap.add_argument("--cell-faithfulness", nargs=3, metavar=("RUN", "TASK", "SEED"))
    a = ap.parse_args()
    if a.cell_stats:
        cell_stats(Path(a.cell_stats[0]), a.cell_stats[1], a.data_dir)
        return 0
    if a.cell_faithfulness:
        run, task, seed = a.cell_faithfulness
        cell_faithfulness(Path(run), task, int(seed), a.data_dir, a.max_examples, a.ig_steps)
        return 0
    if a.record_only:  # records of finished runs whose record is missing (e.g. a later step of their job failed)
        out = Path(a.json)
        have = {key_of(r) for r in read_records(out)}
        for j in plan(a):
            if j.key not in have and j.run is not None and (j.run / "metrics.json").is_file() and (j.run / "model" / "model.safetensors").is_file():
                try:
                    add_record(out, make_record(j, a, 0.0))
                    print("recorded", j.key)
                except Exception as e:  # noqa: BLE001
                    print("could not record", j.key, type(e).__name__, e)
        if a.copy_to:
            Path(a.copy_to).mkdir(parents=True, exist_ok=True)
            (Path(a.copy_to) / out.name).write_text(out.read_text())
        return 0
    if a.render_only:
        from studies.adapt.render import render_all

        render_all(Path(a.json))
        return 0
    return schedule(a)


if __name__ == "__main__":
    sys.exit(main())
