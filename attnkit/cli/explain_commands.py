"""The commands that look at attention: ``explain``, ``layer-weights``, ``words``, ``faithfulness``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnkit.analysis.explain import (
    attention_maps,
    check_layer_weights,
    figure_path,
    layer_weights,
    plot_attention,
    plot_layer_weights,
)
from attnkit.analysis.faithfulness import (
    WordClassifier,
    faithfulness_report,
    plot_faithfulness,
)
from attnkit.analysis.html_view import write_html
from attnkit.analysis.inference import (
    check_readable,
    label_names_of,
    load_for_inference,
)
from attnkit.analysis.words import plot_words, rank_words, received_attention
from attnkit.attention.spec import spec_of
from attnkit.cli.outputs import default_output, output_path
from attnkit.cli.predict_commands import is_qa_model_folder, model_and_split, say_single_texts
from attnkit.errors import UserError
from attnkit.models.pooling import head_of
from attnkit.models.resolve import check_text_room
from attnkit.runfiles.atomic import output_batch, write_json_atomic
from attnkit.runfiles.json_files import read_json
from attnkit.runfiles.names import WRITTEN_BY
from attnkit.runfiles.ownership import check_not_input, check_side_file, check_suffix, record_output
from attnkit.tasks import default_data_dir
from attnkit.tasks.lemmas import LemmatizingTokenizer
from attnkit.tasks.controls import say_control
from attnkit.tasks.readers import check_argument_text, is_blank, texts_sha256
from attnkit.tasks.sst import sst_rationales
from attnkit.training.config import MODEL_DIR, check_seed


def cmd_explain(a) -> int:
    if a.output is None:
        a.output = str(default_output(Path("attention.png")))
    figure_path(a.output, f"--output {a.output}: the heatmap")
    if a.html:
        check_suffix(a.html, (".html", ".htm"), f"--html {a.html}: the page")
    outputs = {"--output": a.output, "--stats": a.stats, "--html": a.html}
    for option, path in outputs.items():  # every output checked before the first is written: a failure writes nothing
        if path:
            output_path(a, path, option)
    if a.stats:
        check_suffix(a.stats, (".json",), f"--stats {a.stats}: the sparsity statistics (JSON)")
    given = {k: str(Path(v).expanduser().resolve()) for k, v in outputs.items() if v}
    if len(set(given.values())) < len(given):
        raise UserError(f"{', '.join(f'{k} {outputs[k]}' for k in given)}: each output needs a file of its own")
    check_argument_text(a.text, "the text to explain")
    if is_blank(a.text):
        raise UserError("the text to explain is empty")
    d, model, tok = load_for_inference(a.model, qa_ok=True)
    check_text_room(a.max_length, tok, False)  # else the heatmap would show [CLS][SEP] alone
    unknown: list = []
    control: list = []
    check_readable(tok, [a.text], 0, "the text to explain,", unknown=unknown, control=control)
    say_control(control, lambda n: "the text to explain")
    if unknown:
        print(f"attnkit explain: note: the text reads as unknown words only ({tok.unk_token}): its attention is over "
              f"{tok.unk_token} tokens, not its words", file=sys.stderr)
    maps = attention_maps(model, tok, a.text, max_length=a.max_length)
    st = maps.stats()
    with output_batch():  # the heatmap, --stats and --html together: if one cannot be written, none replaces its earlier file
        try:
            path = plot_attention(maps, a.output, layer=a.layer, head=a.head)
        except ValueError as e:
            raise UserError(str(e)) from None
        if a.stats:
            write_json_atomic(a.stats, {**st, WRITTEN_BY: "attnkit explain"})
        page = write_html(maps, a.html, title=f'attnkit: {a.text[:60]}') if a.html else None
        if page is not None:
            record_output(page, "attnkit explain")  # made once the page is in place

    print(f"attention: {maps.attention}")
    print("span head: start/end logits per token" if is_qa_model_folder(model) else f"classifier reads: the {head_of(model.config).describe()}")
    print(f"tokens: {' '.join(maps.tokens)}")
    print(f"exact zeros: {st['zero_fraction']:.1%}; support per row: mean {st['mean_support']:.2f}, max {st['max_support']} "
          "(over every layer and head)")
    chosen = maps.rationale(head=a.head)
    if chosen is not None:
        layer, words, n = chosen
        heads = "mean over heads" if a.head is None else f"head {a.head}"
        print(f"rationale (the words {maps.tokens[0]} attends to in layer {layer}, {heads}; {len(words)} of {n} words): "
              + (" ".join(words) or "none"))
    if a.layer is not None and a.head is not None:
        sizes = maps.support_sizes()[a.layer, a.head]
        print("support size per row: " + ", ".join(f"{t}={int(s)}" for t, s in zip(maps.tokens, sizes)))
    print(f"[attnkit] heatmap written to {path}")
    if a.stats:
        print(f"[attnkit] sparsity statistics written to {a.stats}")
    if page is not None:
        print(f"[attnkit] interactive view written to {page}")
    say_single_texts(d, "explained")
    return 0


def cmd_layer_weights(a) -> int:
    if a.output is None:
        a.output = str(default_output(Path("layer_weights.png")))
    figure_path(a.output, f"--output {a.output}: the chart")
    output_path(a, a.output, "--output")
    js = check_side_file(Path(a.output).with_suffix(".json"), f"the layer weights beside --output {a.output}")
    d, model, tok, task, data, ds = model_and_split(a, check=check_layer_weights, say_other_labels=True)
    ds = ds.select(range(min(a.max_samples, len(ds))))
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    w = layer_weights(model, tok, list(ds["text"]), pairs, batch_size=a.batch_size, max_length=a.max_length)
    name = d.parent.name if d.name == MODEL_DIR else d.name
    with output_batch():  # the chart and its values, or neither
        path = plot_layer_weights(w, a.output, title=f"{name}: {task} {a.split} ({len(ds)} texts)")
        write_json_atomic(js, {**w, WRITTEN_BY: "attnkit layer-weights"})
    for k in ("se_mean", "mix"):
        if k in w:
            print(f"{k}: " + " ".join(f"L{i + 1}={x:.3f}" for i, x in enumerate(w[k])))
    print(f"[attnkit] layer weights drawn to {path} (values in {js})")
    return 0


def cmd_words(a) -> int:
    if a.output is None:
        a.output = str(default_output(Path("words.png")))
    figure_path(a.output, f"--output {a.output}: the chart")
    output_path(a, a.output, "--output")
    if a.json:
        check_suffix(a.json, (".json",), f"--json {a.json}: the ranking")  # (--json chart.png wrote JSON under an image's name)
        js = output_path(a, a.json, "--json")
        if Path(a.json).expanduser().resolve() == Path(a.output).expanduser().resolve():
            raise UserError(f"--json {a.json} is also --output: name another file")
    else:
        js = check_side_file(Path(a.output).with_suffix(".json"), f"the ranking beside --output {a.output} (name it with --json)")
    d, model, tok, task, data, ds = model_and_split(a, say_other_labels=True)
    texts = list(ds["text"])[: a.max_samples] if a.max_samples else list(ds["text"])
    names = label_names_of(model)
    readings = received_attention(model, tok, texts, batch_size=a.batch_size, max_length=a.max_length)
    ranking = rank_words(readings, names, top=a.top, min_count=a.min_count)
    result = {
        "model": str(d), "task": task, "split": a.split, "sentences": len(texts),
        "attention": spec_of(model.config).describe(), "min_count": a.min_count,
        "definition": "received(word) = sum over its word pieces of the column sum of the attention matrix over real "
                      "query tokens, averaged over layers and heads; ranked per predicted class by the mean over occurrences",
        "classes": ranking, WRITTEN_BY: "attnkit words",
    }
    with output_batch():  # the ranking and its chart, or neither
        write_json_atomic(js, result)
        png = plot_words(ranking, a.output, title=f"{task} {a.split}: most-attended words per predicted class ({result['attention']})")
    for name, r in ranking.items():
        top = ", ".join(f"{w['word']} {w['mean']:.2f}" for w in r["words"][:10])
        print(f"{name} ({r['predicted_sentences']} predicted): {top}")
    print(f"[attnkit] ranking written to {js}; chart written to {png}")
    return 0


def cmd_faithfulness(a) -> int:
    check_seed(a.seed)
    if a.ig_steps > 1000:
        raise UserError(f"--ig-steps {a.ig_steps}: expected at most 1000 (the steps of one text run as one batch)")
    if a.output:  # (--output data.csv replaced the user's file by JSON: sweep s24)
        check_suffix(a.output, (".json",), f"--output {a.output}: the measures")
    if a.plot:
        figure_path(a.plot, f"--plot {a.plot}: the curves")
    d, model, tok, task, data, ds = model_and_split(a, say_other_labels=True)
    if "text_pair" in ds.column_names:
        raise UserError(f"task {task} pairs two texts: faithfulness explains single texts (removing words of a pair is not defined here)")
    if isinstance(tok, LemmatizingTokenizer):
        raise UserError(f"{d} reads lemmas: removing the user's words would not remove what it reads; faithfulness needs a model of plain words")
    out = output_path(a, a.output, "--output") if a.output else default_output(d / f"faithfulness_{task}_{a.split}.json")
    plot = output_path(a, a.plot, "--plot") if a.plot else check_side_file(out.with_suffix(".png"), f"the curves beside --output {out}")
    if a.rationale_lengths:  # the report read would be replaced by the one written (sweep 2026-11-27f)
        check_not_input(out, "--output", {"--rationale-lengths": a.rationale_lengths})
        check_not_input(plot, "--plot" if a.plot else "the curves", {"--rationale-lengths": a.rationale_lengths})
    texts, rationales = list(ds["text"]), None
    if task == "sst2-ptb":
        pairs = sst_rationales(a.data_dir or default_data_dir(), a.split)
        if [t for t, _ in pairs] != texts:
            raise UserError(f"the sst2-ptb {a.split} trees do not match the {a.split} split: cannot mark the sentiment words")
        rationales = [r for _, r in pairs]
    if a.max_examples:
        texts = texts[: a.max_examples]
        rationales = rationales[: a.max_examples] if rationales is not None else None
    check_text_room(a.max_length, tok, False)  # else every text would be cut to [CLS][SEP]: scores of nothing
    clf = WordClassifier(model, tok, max_length=a.max_length, batch_size=a.batch_size, ig_steps=a.ig_steps)
    lengths = given_lengths(a.rationale_lengths, texts) if a.rationale_lengths else None
    report = faithfulness_report(clf, texts, rationales=rationales, seed=a.seed, rationale_lengths=lengths)
    report = {"model": str(d), "task": task, "split": a.split, "attention": spec_of(model.config).describe(),
              "ig_steps": a.ig_steps, "seed": a.seed, **report, WRITTEN_BY: "attnkit faithfulness"}
    with output_batch():  # the measures and their curves, or neither
        write_json_atomic(out, report)
        plot_faithfulness(report, plot, title=f"{task} {a.split}, {report['attention']}: {report['examples']} texts")
    print(f"{report['examples']} texts of {task} {a.split}; attention: {report['attention']}")
    if report["texts_cut"]:
        print(f"[attnkit] notice: {report['texts_cut']} of the {report['examples']} texts are longer than --max-length "
              f"{report['max_length']} tokens and were cut there: the model read them in part, and their words past the cut "
              "score 0 in every explanation (a larger --max-length reads them whole; texts_cut in the output says how many)")
    lay = report.get("attention_layer")
    if lay:
        print(f"the attention explanation: the [CLS] row of layer {lay['layer']} ({lay['map']}), averaged over heads")
    print(f"{'explanation':<22} {'AOPC comp.':>10} {'AOPC suff.':>10}" + ("  plausibility AP" if rationales is not None else ""))
    for name, row in report["explanations"].items():
        ap = row.get("plausibility_auprc")
        print(f"{name:<22} {row['aopc_comprehensiveness']:>10.4f} {row['aopc_sufficiency']:>10.4f}"
              + (f"  {ap:.4f}" if ap is not None else ("  —" if rationales is not None else "")))
    over = report.get("kendall_tau_texts", {})
    for pair, tau in report["kendall_tau"].items():
        n = over.get(pair, report["examples"])
        print(f"kendall tau {pair}: " + ("— (no text of two or more words that both score apart: a rank correlation "
                                         "needs them)" if tau is None else f"{tau:.3f}" + (
                                             f" (over {n} of the {report['examples']} texts: the others have one word, "
                                             "or one of the two scores their words alike)" if n < report["examples"] else "")))
    print_rationale(report.get("rationale"))
    print(f"[attnkit] measures written to {out}; curves drawn to {plot}")
    return 0


def given_lengths(path: str, texts: list[str]) -> list:
    """The rationale lengths of another faithfulness report, checked to be of these texts in this order."""
    try:
        rep = read_json(path, "attnkit faithfulness's report")
    except OSError as e:  # (it said "0.5: No such file or directory", naming neither the option nor what it takes)
        raise UserError(f"--rationale-lengths {path}: {e.strerror or e}: expected the JSON report of an earlier "
                        "attnkit faithfulness run (its --output)") from None
    rationale = rep.get("rationale")
    lengths = rationale.get("lengths") if isinstance(rationale, dict) else None
    if not isinstance(lengths, list):
        raise UserError(f"--rationale-lengths {path}: the report has no rationale lengths (its model's last layer is not "
                        "sparse, or an older attnkit wrote it)")
    if not all(k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 0) for k in lengths):
        raise UserError(f"--rationale-lengths {path}: rationale.lengths holds something other than word counts >= 0 (or null)")
    if rep.get("texts_sha256") != texts_sha256(texts):
        raise UserError(f"--rationale-lengths {path}: the report measured other texts than these {len(texts)} (its task, "
                        "split or --max-examples differ): lengths must meet their texts")
    if len(lengths) != len(texts):
        raise UserError(f"--rationale-lengths {path}: {len(lengths)} lengths for {len(texts)} texts: they must come from a "
                        "report on the same texts")
    words = [len(t.split()) for t in texts]
    longer = next((i for i, (k, n) in enumerate(zip(lengths, words)) if k is not None and k > n), None)
    if longer is not None:
        raise UserError(f"--rationale-lengths {path}: length {lengths[longer]} for text {longer + 1}, which has "
                        f"{words[longer]} words: the lengths are of other texts")
    return lengths


def print_rationale(rat: dict | None) -> None:
    """The rationale measures as a table (nothing where the report has none)."""
    if not rat:
        return
    if not rat["texts"]:
        print("rationale: no text has one (every length is 0 or none: nothing to measure)")
        return
    src = "its attention's support" if rat["lengths_from"] == "own support" else "the given report's rationales"
    print(f"rationale: the top words at the length of {src}, {rat['mean_words']:.1f} words a text "
          f"({100 * rat['mean_share']:.0f}% of the words; {rat['texts']} texts)")
    gold = any("token_f1" in row for row in rat["explanations"].values())
    print(f"{'explanation':<22} {'comp.':>8} {'suff.':>8}" + (f" {'token F1':>8} {'IOU':>8}" if gold else ""))
    for name, row in rat["explanations"].items():
        print(f"{name:<22} {row['comprehensiveness']:>8.4f} {row['sufficiency']:>8.4f}"
              + (f" {row.get('token_f1', float('nan')):>8.4f} {row.get('iou', float('nan')):>8.4f}" if gold else ""))
