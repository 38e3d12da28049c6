"""A model folder is checked before it is used: config against weights (layers, hidden size,
vocabulary, labels), the tokenizer, the attention block of attnkit's model types, finite weights. Each damage is
refused in one line naming the file, by every command and every loading path of the Python API, and the user's
folder is left byte for byte as it was."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnkit.attention.spec import AttentionSpec
from attnkit.cli import main
from attnkit.models.checks import ModelFolderError, check_model_folder
from attnkit.models.build import build_classifier, build_qa_model, check_se_ratio
from attnkit.models.checkpoint import load_model, load_tokenizer, save_checkpoint
from helpers import save_tiny_classifier, snapshot


def one_line_error(capsys, *needles, out: str = "") -> str:
    """The one line on stderr, with every needle; nothing on stdout but ``out``."""
    res = capsys.readouterr()
    assert res.out == out, res.out
    err = res.err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from helpers import write_tiny_sentiment

    return write_tiny_sentiment(tmp_path_factory.mktemp("checks") / "data", n_train=16, n_dev=8)


@pytest.fixture(scope="module")
def good(tiny_bert, tmp_path_factory) -> Path:
    """A classifier saved as `attnkit train` saves it (two layers, 32 wide, labels negative/positive)."""
    out = tmp_path_factory.mktemp("checks_model") / "model"
    torch.manual_seed(0)
    net = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsegen-lin", -2.0), label_names=["negative", "positive"])
    save_checkpoint(net, out, tokenizer=load_tokenizer(str(tiny_bert)), extra={"task": "csv", "max_length": 16})
    return out


def edit_config(**changes):
    def damage(folder: Path):
        cfg = json.loads((folder / "config.json").read_text())
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return damage


def remove(*names):
    def damage(folder: Path):
        for n in names:
            (folder / n).unlink()
    return damage


def nan_weight(folder: Path):
    tensors = load_file(folder / "model.safetensors")
    name = "bert.encoder.layer.1.attention.self.query.weight"
    tensors[name] = tensors[name].clone()
    tensors[name][3, 5] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def learned_in_config(folder: Path):
    """The attnkit block says lam is learned per head, which the weights do not hold (sweep 2026-11-28z IA: the model
    ran lams started afresh without a word)."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg["attnkit"]["learned"] = "lam"
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))


def garbled_config(folder: Path):
    (folder / "config.json").write_text('{"model_type": "attnkit", "hidden_size": 32,')


#: damage -> what the one-line message must say (the file it names is checked separately)
DAMAGES = {
    "fewer layers in config": (edit_config(num_hidden_layers=1), ["config.json", "num_hidden_layers 1", "2 layers"]),
    "more layers in config": (edit_config(num_hidden_layers=3), ["config.json", "num_hidden_layers 3", "2 layers"]),
    "other labels in config": (edit_config(id2label={"0": "a", "1": "b", "2": "c"}, label2id={"a": 0, "b": 1, "c": 2}),
                               ["config.json", "3 labels (a, b, c)", "classifier", "2 outputs"]),
    "other hidden size": (edit_config(hidden_size=64), ["config.json", "hidden size 64", "32-wide"]),
    "other vocabulary": (edit_config(vocab_size=500), ["config.json", "vocab_size 500"]),
    "no attention block": (edit_config(attnkit=None), ["config.json", "no 'attnkit' block", "softmax"]),
    "bad attention block": (edit_config(attnkit={"attention": "sparsemaxx"}), ["config.json", "not a valid attention"]),
    "garbled config": (garbled_config, ["config.json", "not readable JSON"]),
    "learned lam in config": (learned_in_config, ["config.json", "learns lam per head (attnkit.learned)",
                                                  "the weights hold no learned lam"]),
    # sweep s23a: values no weight's shape shows ran the same weights as another model, without a word
    "heads split in config": (edit_config(num_attention_heads=2), ["config.json", "not the config written with these weights",
                                                                   "num_attention_heads 2 (4 when saved)", ".attnkit-files.json"]),
    "activation in config": (edit_config(hidden_act="relu", layer_norm_eps=1e-5),
                             ["config.json", 'hidden_act "relu" ("gelu" when saved); layer_norm_eps 1e-05 (1e-12 when saved)']),
    # sweep s23c: a tokenizer file added since (special tokens swapped) read every text otherwise, without a word
    "added special tokens map": (lambda f: (f / "special_tokens_map.json").write_text(
        '{"cls_token": "[SEP]", "sep_token": "[CLS]", "pad_token": "[MASK]"}'),
        ["special_tokens_map.json was not saved with these weights", "changes how every text is read"]),
    "no tokenizer": (remove("tokenizer.json"), ["has no tokenizer", "tokenizer.json"]),
    "no tokenizer settings": (remove("tokenizer_config.json"), ["tokenizer_config.json", "no padding token"]),
    # item 8: no tokenizer file at all gave a five-line sentencepiece message
    "no tokenizer files at all": (remove("tokenizer.json", "tokenizer_config.json"), ["has no tokenizer"]),
    "NaN weights": (nan_weight, ["model.safetensors", "1 NaN or infinite", "layer.1.attention.self.query.weight"]),
}


@pytest.fixture(params=list(DAMAGES))
def damaged(request, good, tmp_path):
    damage, needles = DAMAGES[request.param]
    folder = tmp_path / "my model"
    shutil.copytree(good, folder)
    (folder / "NOTES.txt").write_text("my notes on this model\n")
    damage(folder)
    return folder, needles, snapshot(folder)


def test_predict_refuses_each_damage_in_one_line(damaged, capsys):
    folder, needles, before = damaged
    capsys.readouterr()
    assert main(["predict", "--model", str(folder), "good movie", "bad film"]) == 2  # and no prediction on stdout
    one_line_error(capsys, str(folder), *needles)
    assert snapshot(folder) == before


def test_the_python_api_refuses_each_damage(damaged):
    """load_model + load_tokenizer (what every command runs) and the Auto classes through attnkit."""
    from transformers import AutoModelForSequenceClassification

    folder, needles, before = damaged
    with pytest.raises((ModelFolderError, OSError)) as e:
        load_model(folder)
        load_tokenizer(folder)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and all(n in msg for n in needles), msg
    if "tokenizer" not in msg:  # a model-only load does not need the tokenizer
        with pytest.raises((ModelFolderError, OSError)) as e:  # transformers reads a config that is not JSON first
            AutoModelForSequenceClassification.from_pretrained(folder)
        msg = str(e.value)
        assert len(msg.splitlines()) == 1 and (all(n in msg for n in needles) or "config.json' is not a valid JSON" in msg), msg
    assert snapshot(folder) == before


@pytest.mark.parametrize("damage", ["fewer layers in config", "other labels in config", "NaN weights", "no tokenizer",
                                    "no attention block"])
@pytest.mark.parametrize("command", ["evaluate", "explain", "words", "faithfulness", "layer-weights", "predict-split", "train"])
def test_every_command_refuses_a_damaged_model(damage, command, good, data, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "my model"
    shutil.copytree(good, folder)
    DAMAGES[damage][0](folder)
    before = snapshot(folder)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "outputs"
    out.mkdir()
    task = ["--task", "csv", "--data-dir", str(data)]
    argv = {
        "evaluate": ["evaluate", "--model", str(folder), *task],
        "explain": ["explain", "--model", str(folder), "good movie", "--output", str(out / "a.png")],
        "words": ["words", "--model", str(folder), *task, "--split", "validation", "--output", str(out / "w.png")],
        "faithfulness": ["faithfulness", "--model", str(folder), *task, "--split", "validation", "--max-examples", "2",
                         "--output", str(out / "f.json")],
        "layer-weights": ["layer-weights", "--model", str(folder), *task, "--split", "validation", "--output", str(out / "l.png")],
        "predict-split": ["predict", "--model", str(folder), *task, "--split", "validation", "--output", str(out / "p.jsonl")],
        "train": ["train", "--model", str(folder), *task, "--output-dir", str(out / "run"), "--max-steps", "1",
                  "--batch-size", "4", "--max-length", "16", "--no-heatmap"],
    }[command]
    capsys.readouterr()
    assert main(argv) == 2
    one_line_error(capsys, *DAMAGES[damage][1])
    assert snapshot(folder) == before
    assert not [p for p in out.rglob("*") if p.is_file()]  # nothing written


def test_training_from_a_damaged_base_model_is_refused(tiny_bert, tmp_path):
    """build_classifier / build_qa_model (train --model, span QA) check the folder they start from."""
    base = tmp_path / "base"
    shutil.copytree(tiny_bert, base)
    edit_config(num_hidden_layers=4)(base)
    before = snapshot(base)
    for build in (lambda: build_classifier(str(base), 2), lambda: build_qa_model(str(base))):
        with pytest.raises(ModelFolderError, match="num_hidden_layers 4 but model.safetensors holds the weights of 2 layers"):
            build()
    # from scratch, the weights are not read: a NaN in them does not matter, a config that is not JSON does
    nan_base = tmp_path / "nan_base"
    shutil.copytree(tiny_bert, nan_base)
    tensors = load_file(nan_base / "model.safetensors")
    tensors["embeddings.word_embeddings.weight"][0, 0] = float("inf")
    save_file(tensors, nan_base / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFolderError, match="NaN or infinite"):
        build_classifier(str(nan_base), 2)
    assert build_classifier(str(nan_base), 2, from_scratch=True) is not None
    assert snapshot(base) == before


def test_good_folders_pass_and_load_as_before(good, tiny_bert, tiny_roberta):
    for folder in (good, tiny_bert, tiny_roberta):
        check_model_folder(folder, tokenizer=True)
    net = load_model(good)
    assert net.config.num_labels == 2 and net.config.num_hidden_layers == 2
    assert load_tokenizer(good).convert_tokens_to_ids("good") != load_tokenizer(good).unk_token_id
    roberta = build_classifier(str(tiny_roberta), 3)
    assert roberta.config.num_labels == 3


# ----------------------------------------------------------------------------- item 6: no silent reinterpretation


@pytest.fixture(scope="module")
def rte(tmp_path_factory) -> Path:
    """A tiny RTE (a pair task) in the GLUE layout."""
    from helpers import WORDS

    root = tmp_path_factory.mktemp("pairs") / "data"
    folder = root / "glue" / "RTE"
    folder.mkdir(parents=True)
    for name, n in (("train.tsv", 12), ("dev.tsv", 6)):
        rows = [f"{i}\t{WORDS[i % 20]} {WORDS[(i + 3) % 20]} film\t{WORDS[(i + 7) % 20]} movie\t"
                f"{'entailment' if i % 2 else 'not_entailment'}" for i in range(n)]
        (folder / name).write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def rte_model(tiny_bert, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rte_model") / "model"
    return save_tiny_classifier(tiny_bert, out, AttentionSpec("sparsemax"), ["entailment", "not_entailment"], task="rte")


def test_a_pair_task_with_no_room_for_text_is_refused(tiny_bert, rte, rte_model, tmp_path, capsys):
    """[CLS] a [SEP] b [SEP]: --max-length 3 keeps only [CLS][SEP][SEP], 4 one word of one text."""
    run = tmp_path / "run"
    before = snapshot(rte)
    for n in (3, 4):
        assert main(["train", "--task", "rte", "--data-dir", str(rte), "--model", str(tiny_bert), "--output-dir", str(run),
                     "--max-steps", "1", "--batch-size", "4", "--max-length", str(n), "--no-heatmap"]) == 2
        one_line_error(capsys, f"--max-length {n} holds no text", "a pair of texts", "expected at least 5")
        assert not run.exists()
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--model", str(rte_model), "--task", "rte", "--data-dir", str(rte), "--max-length", "4",
                 "--output", str(out)]) == 2
    one_line_error(capsys, "--max-length 4 holds no text")
    assert not out.exists() and snapshot(rte) == before
    # a single text needs one token besides [CLS] and [SEP]
    assert main(["predict", "--model", str(rte_model), "good movie", "--max-length", "2"]) == 2
    one_line_error(capsys, "--max-length 2 holds no text", "a text needs 2 tokens", "expected at least 3")
    # the least that holds text still runs
    assert main(["evaluate", "--model", str(rte_model), "--task", "rte", "--data-dir", str(rte), "--max-length", "5",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["n"] == 6


def test_predict_a_split_of_a_task_with_other_labels_is_refused(good, rte, tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    before = snapshot(good)
    assert main(["predict", "--model", str(good), "--task", "rte", "--data-dir", str(rte), "--split", "validation",
                 "--output", str(out)]) == 2
    one_line_error(capsys, "task rte has labels ['entailment', 'not_entailment']", "['negative', 'positive']", "--task")
    assert not out.exists() and snapshot(good) == before


def test_reading_a_task_of_other_labels_is_said(good, rte, tmp_path, capsys, monkeypatch):
    """words (and layer-weights, faithfulness: the same check) read another task's texts by the model's predicted
    classes, where evaluate and predict refuse the task: it was said nowhere (sweep s23d). One line; the command runs."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["words", "--model", str(good), "--task", "rte", "--data-dir", str(rte), "--split", "validation",
                 "--output", str(tmp_path / "w.png")]) == 0
    err = capsys.readouterr().err
    assert "task rte has labels ['entailment', 'not_entailment'] but" in err and "predicts ['negative', 'positive']" in err
    assert "read by a model of another task" in err, err


def test_single_texts_given_to_a_pair_model_are_labelled_and_said(rte_model, tmp_path, capsys):
    """predict and explain labelled one sentence with an RTE model without a word, as if it were a pair (sweep
    2026-11-27h): one line says the model was trained on pairs, and how to give it its own."""
    capsys.readouterr()
    assert main(["predict", "--model", str(rte_model), "a man sleeps", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert f"{rte_model} was trained on pairs of texts (task rte): a single text is labelled as a pair with an empty " \
           "second text" in err and "--task rte --split validation" in err, err
    assert main(["explain", "--model", str(rte_model), "a man sleeps", "--output", str(tmp_path / "x.png"), "--threads", "1"]) == 0
    assert "a single text is explained as a pair" in capsys.readouterr().err


def test_predict_a_split_of_its_own_task_still_works(rte_model, rte, tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", str(rte_model), "--task", "rte", "--data-dir", str(rte), "--split", "validation",
                 "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and {r["prediction"] for r in rows} <= {"entailment", "not_entailment"}


def test_an_se_ratio_above_the_layers_is_refused_not_clamped(tiny_bert, data, tmp_path, capsys):
    from attnkit.models.pooling import HeadSpec

    run = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(run),
                 "--max-steps", "1", "--batch-size", "4", "--max-length", "16", "--no-heatmap", "--se", "--se-ratio", "3"]) == 2
    one_line_error(capsys, "--se-ratio 3", "2 layer outputs", "from 1 to 2")
    assert not run.exists()
    with pytest.raises(ValueError, match="--se-ratio 5"):
        check_se_ratio(HeadSpec(se=True, se_ratio=5), model=str(tiny_bert))
    check_se_ratio(HeadSpec(se=True, se_ratio=2), model=str(tiny_bert))  # 2 layers // 2 = 1 unit
    net = build_classifier(str(tiny_bert), 2, head=HeadSpec(se=True, se_ratio=2))
    assert net.se.fc1.out_features == 1


@pytest.mark.parametrize("value", ["", " ", ","])
def test_an_empty_freeze_is_refused(tiny_bert, data, tmp_path, capsys, value):
    run = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(run),
                 "--max-steps", "1", "--batch-size", "4", "--max-length", "16", "--no-heatmap", "--freeze", value]) == 2
    one_line_error(capsys, f"--freeze {value!r}", "names no parameter group", "embeddings, attention, encoder")
    assert not run.exists()


def test_a_freeze_group_named_twice_is_refused(tiny_bert, data, tmp_path, capsys):
    """`--freeze attention,attention` was taken as `attention` without a word, where `--sparse-layers 0,0` is refused:
    a group named twice is likely a slip for another (sweep s24b)."""
    run = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(run),
                 "--max-steps", "1", "--batch-size", "4", "--max-length", "16", "--no-heatmap", "--freeze", "attention,Attention"]) == 2
    one_line_error(capsys, "--freeze 'attention,Attention'", "attention is named twice")
    assert not run.exists()


def test_a_min_count_that_leaves_no_word_is_refused(good, data, tmp_path, capsys):
    png, js = tmp_path / "w.png", tmp_path / "w.json"
    argv = ["words", "--model", str(good), "--task", "csv", "--data-dir", str(data), "--split", "validation",
            "--output", str(png), "--json", str(js)]
    assert main(argv + ["--min-count", "1000"]) == 2
    err = one_line_error(capsys, "--min-count 1000 leaves no word", "the most frequent word occurs")
    most = int(err.split("occurs ")[1].split(" ")[0])
    assert 1 <= most < 1000 and not png.exists() and not js.exists()
    assert main(argv + ["--min-count", str(most)]) == 0  # the count it names does rank a word
    ranking = json.loads(js.read_text())["classes"]
    assert any(r["words"] for r in ranking.values())


def test_a_run_that_has_not_finished_is_named_as_such(tiny_bert, data, tmp_path, capsys):
    """A run folder killed before its end (attnkit's record and a checkpoint, no model/ yet) given as --model: the error
    says it is an unfinished run and how to finish it, not "no config.json"."""
    run = tmp_path / "run"
    args = ["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(run),
            "--max-steps", "2", "--eval-steps", "1", "--batch-size", "8", "--max-length", "16", "--no-heatmap", "--keep-checkpoints"]
    assert main(args) == 0
    shutil.rmtree(run / "model")  # finished, then its model deleted: said so, not "resume it"
    capsys.readouterr()
    assert main(["predict", "--model", str(run), "a fine film"]) == 2
    assert "is an attnkit run that finished, but its model/ is gone" in capsys.readouterr().err
    (run / "metrics.json").unlink()  # as if killed after its checkpoints, before the model was written
    capsys.readouterr()
    for argv in (["predict", "--model", str(run), "a fine film"],
                 ["train", "--task", "csv", "--data-dir", str(data), "--model", str(run), "--output-dir", str(tmp_path / "o")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is an attnkit run that has not finished" in err and "checkpoint-2" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1


def test_layer_weights_of_a_model_without_them_says_so_before_asking_for_data(good, tmp_path, capsys, monkeypatch):
    """A plain last-layer classifier has no layer weights: that is the error, before --task or --data-dir is asked for."""
    monkeypatch.chdir(tmp_path)
    assert main(["layer-weights", "--model", str(good), "--task", "sst2", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "has no learned layer weights" in err and "nowhere" not in err and len(err.strip().splitlines()) == 1, err


@pytest.fixture(scope="module")
def pooled(tiny_bert, tmp_path_factory) -> Path:
    """A classifier reading SE-weighted layers through a learned weighted average (SesameBERT's head)."""
    from attnkit.models.pooling import HeadSpec

    out = tmp_path_factory.mktemp("checks_pooled") / "model"
    torch.manual_seed(0)
    net = build_classifier(str(tiny_bert), 2, head=HeadSpec(pooling="weighted", se=True, se_ratio=2))
    save_checkpoint(net, out, tokenizer=load_tokenizer(str(tiny_bert)), extra={"task": "csv", "max_length": 16})
    return out


def _head(change):
    def damage(folder: Path):
        cfg = json.loads((folder / "config.json").read_text())
        change(cfg)
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return damage


HEAD_DAMAGES = {
    # sweep z's ID: it was called "no trained classification head" (the weights are there; the config lost its block)
    "head block deleted": (_head(lambda c: c.pop("attnkit_head")), ["config.json", "no 'attnkit_head' block",
                                                                    "the weights hold SE over layers", "layer_mix"]),
    # sweep z's IE: "unknown layer pooling 'cls'" named neither the file nor the field
    "unknown pooling": (_head(lambda c: c["attnkit_head"].update(pooling="cls")),
                        ["config.json", "'attnkit_head' block is not a valid layer pooling", "'cls'"]),
    "head not a block": (_head(lambda c: c.update(attnkit_head="weighted")), ["config.json", "not a block of settings"]),
    "se switched off": (_head(lambda c: c["attnkit_head"].update(se=False)), ["config.json", "reads the weighted layer",
                                                                             "the weights hold SE over layers"]),
    "other pooling": (_head(lambda c: c["attnkit_head"].update(pooling="first")), ["config.json", "SE + first layer",
                                                                                   "weighted average of the layers"]),
}


@pytest.mark.parametrize("damage", list(HEAD_DAMAGES))
def test_a_layer_pooling_that_does_not_fit_the_weights_is_refused_naming_the_field(damage, pooled, tmp_path, capsys):
    change, needles = HEAD_DAMAGES[damage]
    folder = tmp_path / "pooled model"
    shutil.copytree(pooled, folder)
    change(folder)
    before = snapshot(folder)
    capsys.readouterr()
    assert main(["predict", "--model", str(folder), "good movie"]) == 2
    one_line_error(capsys, str(folder), *needles)
    with pytest.raises(ModelFolderError, match="config.json"):
        load_model(folder)
    assert snapshot(folder) == before


def test_a_pooled_model_as_saved_passes_and_a_plain_one_is_not_asked_for_pooling_weights(pooled, good, capsys):
    check_model_folder(pooled)
    check_model_folder(good)
    assert main(["predict", "--model", str(pooled), "good movie"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "good movie"


def test_edits_that_do_not_change_what_the_weights_compute_are_free(good, tmp_path, capsys):
    """Label names, dropout, the attention block (compared on one checkpoint on purpose) may be edited; a folder whose
    manifest is deleted (other weights saved there by hand) is no longer compared with what attnkit saved."""
    folder = tmp_path / "edited"
    shutil.copytree(good, folder)
    edit_config(id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1}, hidden_dropout_prob=0.3,
                attnkit={"attention": "sparsemax"})(folder)
    check_model_folder(folder)
    assert main(["predict", "--model", str(folder), "good movie"]) == 0
    assert set(json.loads(capsys.readouterr().out)["probabilities"]) == {"neg", "pos"}
    edit_config(num_attention_heads=2)(folder)
    with pytest.raises(ModelFolderError, match="num_attention_heads 2 .4 when saved."):
        check_model_folder(folder)
    (folder / ".attnkit-files.json").unlink()
    check_model_folder(folder)
    assert load_model(folder).config.num_attention_heads == 2
