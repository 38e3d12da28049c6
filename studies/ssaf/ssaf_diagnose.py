"""Why does SSAF trail softmax on a task? Diagnostics of the attention swap on the bundled MiniLM.

On ``--sentences`` dev texts of ``--task`` it measures, per layer and head:

* **before any training** (the pre-trained MiniLM, whose heads were trained under softmax): the attention
  scores each head computes, the share of softmax's probability mass that falls on sparsegen-lin's support at
  the task's lam ("mass kept"; 1 - mass kept is what the swap throws away), the support size, the total
  variation between the two maps, and, over a range of lams, the same numbers for all heads together;
* **what the swap does to the encoder**: cosine similarity per layer between the hidden states of the pre-trained
  MiniLM under softmax and under sparsegen-lin (the representations the new classifier starts from);
* **after fine-tuning** (the Table 2 SSAF runs in ``--runs``, one per seed, if their models are there): the support
  size per layer and head, against the pre-trained one;
* **head size**: how the spread of the scaled scores grows with the dimensions of a head (half of MiniLM's 32
  against all of them), extrapolated to BERT-base's 64;
* **training curves** of softmax and SSAF (train loss, dev accuracy per epoch) from ``ssaf_table2.json``.

Writes ``OUT.json`` and ``OUT.png``::

    python -m studies.ssaf.ssaf_diagnose --task semeval2013 --data-dir ../shared/data --runs /work/runs \
        --out studies/ssaf/results/ssaf_diagnose_semeval2013
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from attnkit.analysis.explain import pyplot, save_figure
from attnkit.attention.maps import sparsegen_lin
from attnkit.attention.spec import AttentionSpec
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_model, load_tokenizer
from attnkit.tasks import load_task
from attnkit.training.config import PAPER_LAM
from studies.common import TASKS, recorded_scores

SCAN = (-12.0, -8.0, -6.0, -4.0, -3.0, -2.0, -1.0, 0.0)


def encode(tok, texts, max_length):
    return tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def pretrained_scores(texts, max_length):
    """Attention scores [B, H, L, L] (-inf on padded keys) of every layer of the pre-trained MiniLM, its hidden
    states under softmax, the padding mask, and each layer's queries and keys [B, L, H * d_head]."""
    qk: dict[str, torch.Tensor] = {}
    with recorded_scores() as seen:
        model = build_classifier("minilm", 2, AttentionSpec("record")).eval()
        for name, mod in model.named_modules():
            if name.endswith(("attention.self.query", "attention.self.key")):
                mod.register_forward_hook(lambda m, i, o, name=name: qk.__setitem__(name, o.detach().float()))
        enc = encode(load_tokenizer("minilm"), texts, max_length)
        with torch.inference_mode():
            hidden = model(**enc, output_hidden_states=True).hidden_states
    layers = sorted({n.rsplit(".", 1)[0] for n in qk}, key=lambda n: int(n.split(".layer.")[1].split(".")[0]))
    pairs = [(qk[n + ".query"], qk[n + ".key"]) for n in layers]
    return seen, hidden, enc["attention_mask"].bool(), pairs, model.config.num_attention_heads


def head_size_scaling(pairs, rows, heads: int, trials: int = 8, seed: int = 0) -> dict:
    """How the spread of the scaled scores q.k / sqrt(d) grows with the head size d, inside MiniLM.

    For each layer: the within-row standard deviation of the scores computed on a random half of each head's
    dimensions (scaled by sqrt(d/2)) over that of the full head (scaled by sqrt(d)). A ratio of 1 means the spread
    does not depend on d (independent dimensions: what the 1/sqrt(d) scaling assumes); 1/sqrt(2) = 0.71 means it grows
    as sqrt(d) (dimensions that agree). Extrapolated to d = 64 (BERT-base) with the same per-dimension statistics, the
    spread is std_32 / ratio, and sparsegen-lin's lam on a 64-dim head matches MiniLM's lam' = 1 - ratio (1 - lam).
    """
    g = torch.Generator().manual_seed(seed)
    key_ok = rows[:, None, None, :]
    q_ok = rows[:, None, :]

    def spread(q, k, dims):
        z = torch.einsum("bhld,bhmd->bhlm", q[..., dims], k[..., dims]) / len(dims) ** 0.5
        z = torch.where(key_ok, z, torch.nan)
        mu = torch.nanmean(z, -1, keepdim=True)
        sd = torch.sqrt(torch.nanmean((z - mu) ** 2, -1))
        return float(sd[q_ok.expand_as(sd)].mean())

    ratios, full = [], []
    for q, k in pairs:
        b, n, hd = q.shape
        d = hd // heads
        q, k = (x.view(b, n, heads, d).transpose(1, 2) for x in (q, k))  # [B, H, L, d]
        s_full = spread(q, k, torch.arange(d))
        halves = [spread(q, k, torch.randperm(d, generator=g)[: d // 2]) for _ in range(trials)]
        full.append(round(s_full, 4))
        ratios.append(round(float(np.mean(halves)) / s_full, 4))
    r = float(np.mean(ratios))
    return {"head_size": d, "score_std_per_layer": full, "half_over_full_per_layer": ratios, "half_over_full": round(r, 4),
            "paper_lam_on_64_dims_as_minilm_lam": {str(lam): round(1 - r * (1 - lam), 2) for lam in (PAPER_LAM[t] for t in TASKS)}}


def row_mean(x: torch.Tensor, rows: torch.Tensor) -> np.ndarray:
    """Mean of x [B, H, L] over real query rows -> [H]."""
    m = rows[:, None, :].expand_as(x).float()
    return ((x * m).sum((0, 2)) / m.sum((0, 2))).numpy()


def compare_maps(scores: list[torch.Tensor], rows: torch.Tensor, lam: float) -> dict[str, np.ndarray]:
    """Softmax against sparsegen-lin on the same scores, per layer and head: arrays [layers, heads]."""
    out = {k: [] for k in ("mass_kept", "support", "support_share", "total_variation", "softmax_entropy", "score_std")}
    length = rows.sum(-1).float()[:, None, None]  # real keys per sentence
    for s in scores:
        soft, sparse = torch.softmax(s, -1), sparsegen_lin(s, lam)
        keep = sparse > 0
        finite = torch.isfinite(s)
        z = torch.where(finite, s, torch.nan)
        out["mass_kept"].append(row_mean((soft * keep).sum(-1), rows))
        out["support"].append(row_mean(keep.sum(-1).float(), rows))
        out["support_share"].append(row_mean(keep.sum(-1).float() / length, rows))
        out["total_variation"].append(row_mean(0.5 * (soft - sparse).abs().sum(-1), rows))
        out["softmax_entropy"].append(row_mean(-(soft * torch.log(soft.clamp_min(1e-30))).sum(-1), rows))
        mu = torch.nanmean(z, -1, keepdim=True)
        out["score_std"].append(row_mean(torch.sqrt(torch.nanmean((z - mu) ** 2, -1)), rows))
    return {k: np.stack(v) for k, v in out.items()}


def support_of(model, tok, texts, max_length) -> np.ndarray:
    """Mean non-zeros per attention row of a model, [layers, heads]."""
    enc = encode(tok, texts, max_length)
    rows = enc["attention_mask"].bool()
    with torch.inference_mode():
        att = model.eval()(**enc, output_attentions=True).attentions
    return np.stack([row_mean((a.float() > 0).sum(-1).float(), rows) for a in att])


def hidden_cosine(h_soft, h_sparse, rows) -> list[float]:
    """Mean cosine similarity of each layer's token states (real tokens), softmax vs sparse, layers 1..N."""
    out = []
    for a, b in zip(h_soft[1:], h_sparse[1:]):
        cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
        out.append(float(cos[rows].mean()))
    return out


def mean_curves(table: Path, task: str) -> dict:
    """Per method (softmax, SSAF): mean dev-accuracy curve and train-loss curve over the seeds that have them."""
    recs = json.loads(table.read_text()) if table.is_file() else []
    out = {}
    for method in ("softmax", "SSAF"):
        got = [r for r in recs if r["task"] == task and r["method"] == method and r.get("dev_curve")]
        if got:
            n_dev = min(len(r["dev_curve"]) for r in got)
            n_loss = min(len(r["train_loss_curve"]) for r in got)
            out[method] = {"seeds": [r["seed"] for r in got],
                           "dev_curve": np.mean([r["dev_curve"][:n_dev] for r in got], 0).round(4).tolist(),
                           "train_loss_curve": np.mean([r["train_loss_curve"][:n_loss] for r in got], 0).round(4).tolist()}
    return out


def plot(res: dict, path: Path) -> Path:
    plt = pyplot()

    lam = res["lam"]
    fig, ax = plt.subplots(2, 3, figsize=(15, 8.5))
    pre = res["pretrained"]

    def heat(a, data, title, vmin=None, vmax=None, cmap="viridis"):
        im = a.imshow(np.array(data), aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax)
        a.set_xlabel("head")
        a.set_ylabel("layer")
        a.set_xticks(range(np.array(data).shape[1]))
        a.set_yticks(range(np.array(data).shape[0]))
        a.set_title(title, fontsize=10)
        fig.colorbar(im, ax=a, fraction=0.046)

    heat(ax[0, 0], pre["mass_kept"], f"pre-trained: softmax mass on sparsegen-lin's support (lam {lam:g})", 0, 1)
    sup_max = max(np.max(pre["support_forward"]), np.max(res["trained"]["support_mean"]) if res["trained"] else 0)
    heat(ax[0, 1], pre["support_forward"], "pre-trained under sparsegen-lin: keys per row", 1, sup_max)
    if res["trained"]:
        heat(ax[0, 2], res["trained"]["support_mean"],
             f"after SSAF fine-tuning (seeds {','.join(map(str, res['trained']['seeds']))}): keys per row", 1, sup_max)
    else:
        ax[0, 2].axis("off")
    scan = res["lam_scan"]
    xs = [r["lam"] for r in scan]
    a = ax[1, 0]
    a.plot(xs, [r["mass_kept"] for r in scan], "o-", label="softmax mass kept")
    a.plot(xs, [r["total_variation"] for r in scan], "s-", label="total variation")
    a.plot(xs, [r["support_share"] for r in scan], "^-", label="support / length")
    for tl in {PAPER_LAM[t] for t in TASKS}:
        a.axvline(tl, color="grey", ls=":", lw=0.8)
    a.axvline(lam, color="red", ls="--", lw=1, label=f"{res['task']} lam")
    a.set_xlabel("lam")
    a.set_title("pre-trained MiniLM, all heads: what sparsegen-lin changes", fontsize=10)
    a.set_ylim(0, 1)
    a.legend(fontsize=8)
    a = ax[1, 1]
    layers = range(1, len(res["hidden_cosine"]) + 1)
    a.plot(layers, res["hidden_cosine"], "o-")
    a.set_xlabel("layer")
    a.set_ylabel("cosine")
    a.set_title(f"token states, softmax vs sparsegen-lin (lam {lam:g}), pre-trained", fontsize=10)
    a = ax[1, 2]
    cur = res["curves"]
    if cur:
        for m, c in cur.items():
            steps = np.linspace(0, 1, len(c["train_loss_curve"]))
            a.plot(steps, c["train_loss_curve"], label=f"{m} train loss")
        a2 = a.twinx()
        for m, c in cur.items():
            ep = np.arange(1, len(c["dev_curve"]) + 1) / len(c["dev_curve"])
            a2.plot(ep, c["dev_curve"], "o--", label=f"{m} dev acc")
        a2.set_ylabel("dev accuracy")
        a2.legend(fontsize=8, loc="upper right")
        a.legend(fontsize=8, loc="lower left")
        a.set_xlabel("share of training")
        a.set_title(f"curves ({res['curves_task']}, mean over seeds)", fontsize=10)
    else:
        a.axis("off")
    fig.suptitle(f"SSAF diagnostics on {res['task']} ({res['sentences']} dev texts, bundled MiniLM, head size 32)")
    fig.tight_layout()
    return save_figure(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="semeval2013", choices=sorted(TASKS))
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--runs", default="runs", help="folder of the Table 2 run folders (TASK__SSAF__sN/model)")
    ap.add_argument("--table", default="studies/ssaf/results/ssaf_table2.json")
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--out", default=None, help="output stem (default studies/ssaf/results/ssaf_diagnose_TASK)")
    a = ap.parse_args()
    out = Path(a.out or f"studies/ssaf/results/ssaf_diagnose_{a.task}")
    lam = PAPER_LAM[a.task]
    texts = list(load_task(a.task, a.data_dir).splits["validation"]["text"])[: a.sentences]

    scores, h_soft, rows, pairs, heads = pretrained_scores(texts, a.max_length)
    scaling = head_size_scaling(pairs, rows, heads)
    pre = {k: v.round(4).tolist() for k, v in compare_maps(scores, rows, lam).items()}
    scan = []
    for x in SCAN:
        c = compare_maps(scores, rows, x)
        scan.append({"lam": x, **{k: round(float(v.mean()), 4) for k, v in c.items()}})
    sparse = build_classifier("minilm", 2, AttentionSpec("sparsegen-lin", lam)).eval()
    tok = load_tokenizer("minilm")
    enc = encode(tok, texts, a.max_length)
    with torch.inference_mode():
        out_sparse = sparse(**enc, output_hidden_states=True, output_attentions=True)
    pre["support_forward"] = np.stack([row_mean((x > 0).sum(-1).float(), rows) for x in out_sparse.attentions]).round(3).tolist()
    cosine = [round(c, 4) for c in hidden_cosine(h_soft, out_sparse.hidden_states, rows)]

    trained, seeds = [], []
    for d in sorted(Path(a.runs).glob(f"{a.task}__SSAF__s*/model")):
        trained.append(support_of(load_model(d), load_tokenizer(d), texts, a.max_length))
        seeds.append(int(d.parent.name.rsplit("__s", 1)[1]))
    cur = mean_curves(Path(a.table), a.task)
    cur_task = a.task
    if not cur:  # runs recorded before the curves were kept: show sentube-auto's
        cur, cur_task = mean_curves(Path(a.table), "sentube-auto"), "sentube-auto"
    res = {
        "task": a.task, "lam": lam, "sentences": len(texts),
        "mean_length": round(float(rows.sum(-1).float().mean()), 2),
        "pretrained": pre,
        "pretrained_means": {k: round(float(np.mean(v)), 4) for k, v in pre.items()},
        "lam_scan": scan,
        "hidden_cosine": cosine,
        "head_size_scaling": scaling,
        "trained": {"seeds": seeds, "support_per_seed": [t.round(3).tolist() for t in trained],
                    "support_mean": np.mean(trained, 0).round(3).tolist(),
                    "support_mean_all": round(float(np.mean(trained)), 3)} if trained else None,
        "curves": cur, "curves_task": cur_task,
        "command": "python -m studies.ssaf.ssaf_diagnose " + " ".join(sys.argv[1:]),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    plot(res, out.with_suffix(".png"))
    pm = res["pretrained_means"]
    print(f"{a.task}: lam {lam:g}, {len(texts)} dev texts, mean length {res['mean_length']} tokens")
    print(f"pre-trained, all heads: softmax mass kept {pm['mass_kept']:.3f}, support {pm['support']:.2f} "
          f"({pm['support_share']:.1%} of the row), total variation {pm['total_variation']:.3f}, "
          f"score std {pm['score_std']:.2f}")
    print("per layer mass kept:", [round(float(np.mean(x)), 3) for x in pre["mass_kept"]])
    print("hidden-state cosine per layer:", cosine)
    print("head size: score std (half the dims) / (all 32), per layer:", scaling["half_over_full_per_layer"],
          "-> the paper's lams on 64-dim heads act like MiniLM lams", scaling["paper_lam_on_64_dims_as_minilm_lam"])
    if trained:
        print("support per layer, pre-trained forward:", [round(float(np.mean(x)), 2) for x in pre["support_forward"]])
        print("support per layer, after fine-tuning:  ", [round(float(np.mean(x)), 2) for x in res["trained"]["support_mean"]])
    for r in scan:
        print(f"lam {r['lam']:>5g}: mass kept {r['mass_kept']:.3f}, support share {r['support_share']:.3f}, TV {r['total_variation']:.3f}")


if __name__ == "__main__":
    main()
