"""An output never replaces an input or a user's file: not the model's or the data's files, not a run's own files, not a
GLUE submission of the user's; a failing command writes nothing; a folder, FIFO or device where a file belongs is
named as such; the error handling covers the libraries' own logging."""

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import (
    error_line,
    only_stderr_line,
    snapshot_without_lock,
    two_step_train_args,
    write_tiny_rte,
)

pytestmark = pytest.mark.slow


def test_output_that_is_also_the_input_is_refused(run, tmp_path, capsys):
    f = tmp_path / "a.txt"
    f.write_text("a fine film\na dull film\n")
    assert main(["predict", "--model", str(run), "--file", str(f), "--output", str(f)]) == 2
    only_stderr_line(capsys, "--output", "is also the input --file")
    assert f.read_text() == "a fine film\na dull film\n"


def test_a_failing_command_writes_nothing(run, tmp_path, capsys):
    heat = tmp_path / "heat.png"
    assert main(["explain", "--model", str(run), "good film", "--output", str(heat), "--stats", str(tmp_path)]) == 2
    only_stderr_line(capsys, "--stats", "is a folder")
    assert not heat.exists()
    # a missing folder is made for every output alike
    assert main(["explain", "--model", str(run), "good film", "--output", str(heat), "--stats", str(tmp_path / "new" / "s.json")]) == 0
    assert heat.is_file() and json.loads((tmp_path / "new" / "s.json").read_text())["written_by"] == "attnkit explain"
    assert f"sparsity statistics written to {tmp_path / 'new' / 's.json'}" in capsys.readouterr().out
    # the statistics are JSON: an image's name for them is refused before anything is written (sweep 2026-11-28r, Z)
    assert main(["explain", "--model", str(run), "good film", "--output", str(tmp_path / "h2.png"), "--stats", str(tmp_path / "s.png")]) == 2
    only_stderr_line(capsys, "--stats", "must end in .json")
    assert not (tmp_path / "h2.png").exists() and not (tmp_path / "s.png").exists()


def test_sweep_report_only_with_a_bad_view_layer_rewrites_nothing(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "sweep"
    base = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out), "--lams", "-2",
            "--seeds", "1", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--max-steps", "2", "--eval-steps", "2"]
    assert main(base) == 0
    before = snapshot_without_lock(out)
    capsys.readouterr()
    assert main(base + ["--report-only", "--view-layer", "7"]) == 2
    only_stderr_line(capsys, "--view-layer 7", "layers 0 to 1")
    assert snapshot_without_lock(out) == before


def test_a_sweeps_own_files_are_never_an_output(tiny_bert, data, tmp_path, capsys):
    """evaluate/predict/explain/words aimed at a sweep folder's sweep.json, .md or .png replaced them without a word
    (sweep 2026-11-28n D: the record of the cells and the data's fingerprint lost): refused as a run's own files are."""
    out = tmp_path / "sw"
    sweep = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out),
             "--lams", "-2", "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "1",
             "--eval-steps", "1", "--no-heatmap"]
    assert main(sweep) == 0
    cell = next(c for c in out.iterdir() if c.name.startswith("lam"))
    before = snapshot_without_lock(out)
    capsys.readouterr()
    for argv, name in ((["evaluate", "--data-dir", str(data), "--output", "{sw}/sweep.json"], "sweep.json"),
                       (["predict", "good film", "--output", "{sw}/sweep.md"], "sweep.md"),
                       (["explain", "good film", "--output", "{sw}/sweep.png"], "sweep.png"),
                       (["explain", "good film", "--output", "{tmp}/e.png", "--stats", "{sw}/sweep.json"], "sweep.json"),
                       (["words", "--data-dir", str(data), "--min-count", "1", "--output", "{tmp}/w.png", "--json",
                         "{sw}/sweep.json"], "sweep.json")):
        argv = [x.format(sw=out, tmp=tmp_path) for x in argv]
        assert main([argv[0], "--model", str(cell), *argv[1:]]) == 2, argv
        only_stderr_line(capsys, f"is one of the files the sweep {out.resolve()} keeps of itself ({name})")
    assert snapshot_without_lock(out) == before
    assert main(sweep + ["--report-only"]) == 0  # the sweep still reads its record


@pytest.fixture
def user_run(tiny_bert, data, tmp_path):
    """A finished run of the user's, copied where commands may aim outputs at its files."""
    out = tmp_path / "user_run"
    assert main(two_step_train_args(tiny_bert, data, out)) == 0
    return out


@pytest.mark.parametrize("argv,target", [
    (["evaluate", "--output", "{run}/model/config.json"], "model/config.json"),
    (["evaluate", "--output", "{run}/metrics.json"], "metrics.json"),
    (["explain", "good film", "--output", "{tmp}/g.png", "--stats", "{run}/model/config.json"], "model/config.json"),
    (["words", "--output", "{tmp}/w.png", "--json", "{run}/run_config.json", "--min-count", "1"], "run_config.json"),
    (["predict", "good film", "--output", "{run}/model/tokenizer.json"], "model/tokenizer.json"),
    (["predict", "--split", "validation", "--task", "csv", "--output", "{data}/dev.csv"], "DATA/dev.csv"),
])
def test_an_output_never_replaces_the_models_or_the_datas_files(user_run, data, tmp_path, capsys, argv, target):
    fill = {"run": str(user_run), "tmp": str(tmp_path), "data": str(data)}
    argv = [x.format(**fill) for x in argv]
    path = data / target[5:] if target.startswith("DATA/") else user_run / target
    before, run_before = path.read_bytes(), snapshot_without_lock(user_run)
    extra = [] if argv[0] == "explain" or (argv[0] == "predict" and "--split" not in argv) else ["--data-dir", str(data)]
    assert main([argv[0], "--model", str(user_run), *extra] + argv[1:]) == 2
    if "/" in target:  # a file of the model or of the data
        only_stderr_line(capsys, "that attnkit did not write as an output")
    else:  # the run's own record, which attnkit wrote, though not as a command's output: said so
        only_stderr_line(capsys, f"is one of the files the run {user_run.resolve()} keeps of itself ({target})")
    assert path.read_bytes() == before and snapshot_without_lock(user_run) == run_before


def test_words_json_must_be_named_json(user_run, data, tmp_path, capsys):
    """`words --json chart.png` wrote JSON under an image's name, replacing a file there (sweep 2026-11-27m M3): the
    ranking's file must end in .json, as `evaluate --output` must."""
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"mine")
    assert main(["words", "--model", str(user_run), "--data-dir", str(data), "--min-count", "1", "--output",
                 str(tmp_path / "w.png"), "--json", str(chart)]) == 2
    only_stderr_line(capsys, f"--json {chart}: the ranking file must end in .json, got 'chart.png'")
    assert chart.read_bytes() == b"mine" and not (tmp_path / "w.png").exists()


def test_a_folder_where_a_file_belongs_and_a_missing_data_folder_are_named(tiny_bert, tmp_path, capsys):
    d = tmp_path / "d"
    (d / "train.csv").mkdir(parents=True)
    (d / "dev.csv").write_text("text,label\na,x\n")
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv is a folder, not a file")
    assert main(["tasks", "--data-dir", str(tmp_path / "nowhere")]) == 2
    only_stderr_line(capsys, "does not exist")
    assert main(["pretrain", "--task", "csv", "--data-dir", str(d), "--max-length", "1", "--output-dir", str(tmp_path / "p")]) == 2
    only_stderr_line(capsys, "--max-length 1")


def test_a_runs_own_files_and_its_training_data_are_never_an_output(user_run, data, tmp_path, capsys):
    before, run_before = (data / "dev.csv").read_bytes(), snapshot_without_lock(user_run)
    # the data the model was trained on, though this command reads none of it
    assert main(["predict", "--model", str(user_run), "good film", "--output", str(data / "dev.csv")]) == 2
    only_stderr_line(capsys, "the data the model was trained on")
    # the run's own figures, though attnkit drew them
    assert main(["explain", "--model", str(user_run), "good film", "--output", str(user_run / "curves.png")]) == 2
    only_stderr_line(capsys, "keeps of itself (curves.png)")
    assert main(["words", "--model", str(user_run), "--data-dir", str(data), "--min-count", "1",
                 "--output", str(user_run / "curves.png")]) == 2
    only_stderr_line(capsys, "keeps of itself (curves.png)")
    assert (data / "dev.csv").read_bytes() == before and snapshot_without_lock(user_run) == run_before
    # a command's own earlier output there may be replaced (evaluate's default file, then named)
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data)]) == 0
    out = next((user_run / "model").glob("eval_*.json"))
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data), "--output", str(out)]) == 0


def test_default_outputs_keep_a_users_file(user_run, data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("attention.png").write_bytes(b"my picture")
    assert main(["explain", "--model", str(user_run), "good film"]) == 2
    only_stderr_line(capsys, "attention.png exists and was not written by attnkit")
    assert Path("attention.png").read_bytes() == b"my picture"
    mine = user_run / "model" / "eval_csv_validation.json"
    mine.write_text("my notes")
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data)]) == 2
    only_stderr_line(capsys, "was not written by attnkit", "--output")
    assert mine.read_text() == "my notes"
    mine.unlink()


def test_a_data_dir_that_is_a_file_is_named_so(tiny_bert, data, tmp_path, capsys):
    assert main(two_step_train_args(tiny_bert, data / "train.csv", tmp_path / "o")) == 2
    only_stderr_line(capsys, "is a file, not a folder")


@pytest.fixture(scope="module")
def rte_run(tiny_bert, tmp_path_factory):
    root = write_tiny_rte(tmp_path_factory.mktemp("rel2_rte"))
    out = root / "run"
    assert main(["train", "--task", "rte", "--data-dir", str(root), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--batch-size", "8", "--max-length", "16", "--no-heatmap", "--max-steps", "1"]) == 0
    return root, out


def test_a_glue_submission_file_of_the_users_is_refused(rte_run, tmp_path, capsys):
    root, run = rte_run
    s = tmp_path / "s"
    s.mkdir()
    (s / "RTE.tsv").write_text("index\tprediction\n0\tentailment\n")  # the user's own submission
    before = snapshot_without_lock(s)
    predict = ["predict", "--model", str(run), "--task", "rte", "--data-dir", str(root), "--split", "test"]
    assert main(predict + ["--output-dir", str(s)]) == 2
    error_line(capsys, str(s / "RTE.tsv"), "was not written by attnkit")
    assert snapshot_without_lock(s) == before
    # --output names JSON lines, which a test split does not write: refused, not dropped (sweep 2026-11-28q Q)
    assert main(predict + ["--output", str(tmp_path / "p.jsonl")]) == 2
    error_line(capsys, f"--output {tmp_path / 'p.jsonl'}: task rte test writes GLUE's submission file RTE.tsv", "drop --output")
    assert not (tmp_path / "p.jsonl").exists()
    # into a new folder: written; the same command again replaces attnkit's own file
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 0
    first = (tmp_path / "t" / "RTE.tsv").read_bytes()
    assert first.startswith(b"index\tprediction\n") and len(first.splitlines()) == 4
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "RTE.tsv").read_bytes() == first
    # once the user edits it, it is theirs
    with open(tmp_path / "t" / "RTE.tsv", "a") as f:
        f.write("# checked by hand\n")
    edited = (tmp_path / "t" / "RTE.tsv").read_bytes()
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 2
    assert (tmp_path / "t" / "RTE.tsv").read_bytes() == edited


def test_the_same_predict_split_twice_replaces_its_own_output(rte_run, capsys):
    root, run = rte_run
    predict = ["predict", "--model", str(run), "--data-dir", str(root), "--split", "validation"]
    assert main(predict) == 0
    out = run / "model" / "predictions_rte_validation.jsonl"
    first = out.read_bytes()
    assert main(predict) == 0  # attnkit's own earlier output: replaced, not refused
    assert out.read_bytes() == first and len(first.splitlines()) == 4
    out.write_text('{"idx": 0, "prediction": "mine"}\n')
    assert main(predict) == 2
    error_line(capsys, str(out), "was not written by attnkit")
    assert out.read_text() == '{"idx": 0, "prediction": "mine"}\n'


def test_the_cli_error_handling_covers_quieting_the_libraries(finished, capsys, monkeypatch):
    cli_main = sys.modules["attnkit.cli.main"]  # (attnkit.cli.main is also the name of the function)

    def broken(restore):
        raise OSError(errno.EACCES, "Permission denied", "/somewhere/hf-cache")

    monkeypatch.setattr(cli_main, "_quiet_libraries", broken)
    assert main(["predict", "--model", str(finished), "a fine film"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "/somewhere/hf-cache" in err


def test_main_called_from_python_leaves_the_process_as_it_was(finished, tmp_path, capsys):
    """After one attnkit.cli.main([...]) the process ignored every UserWarning and FutureWarning (the caller's too),
    transformers stayed quiet, and a later call's -v did nothing (sweep 2026-11-28w FB): what a command changes is put
    back when it returns."""
    import logging
    import warnings

    import torch
    from transformers.utils import logging as hf_logging

    attnkit_log = logging.getLogger("attnkit")
    before = (list(warnings.filters), hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(),
              attnkit_log.level, torch.get_num_threads(), os.environ.get("TOKENIZERS_PARALLELISM"))
    for verbose in ([], ["-v"]):
        assert main([*verbose, "predict", "--model", str(finished), "--threads", "1", "--output", str(tmp_path / "p.jsonl"),
                     "a fine film"]) == 0
        assert main([*verbose, "predict", "--model", str(tmp_path / "no-such-model"), "a fine film"]) == 2
        after = (list(warnings.filters), hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(),
                 attnkit_log.level, torch.get_num_threads(), os.environ.get("TOKENIZERS_PARALLELISM"))
        assert after == before
    with pytest.warns(UserWarning, match="the caller's own"):
        warnings.warn("the caller's own", UserWarning)
    capsys.readouterr()


def test_a_fifo_or_a_device_as_file_is_named_so(finished, tmp_path, capsys):
    fifo = tmp_path / "texts"
    os.mkfifo(fifo)
    assert main(["predict", "--model", str(finished), "--file", str(fifo)]) == 2
    line = error_line(capsys, f"--file {fifo} is a named pipe (FIFO), not a regular file")
    assert "does not exist" not in line
    assert main(["predict", "--model", str(finished), "--file", "/dev/null"]) == 2
    error_line(capsys, "--file /dev/null is a character device, not a regular file")
    assert main(["predict", "--model", str(finished), "--file", str(tmp_path / "nothing.txt")]) == 2
    error_line(capsys, "does not exist")


def test_json_lines_hold_one_row_per_line_for_every_reader(tmp_path):
    """Texts holding U+2028, U+2029 or U+0085 (lines in Python's splitlines and in JavaScript) stay one row per line."""
    from attnkit.cli.outputs import write_jsonl

    rows = [{"text": "a\u2028b"}, {"text": "c\u2029d\x85e é"}, {"text": "plain"}]
    out = tmp_path / "p.jsonl"
    write_jsonl(rows, str(out), "predictions")
    text = out.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(rows) == text.count("\n")
    assert [json.loads(line) for line in text.splitlines()] == rows


@pytest.mark.parametrize("text", ["\x01\x02", "\u0301", "\ufffd"])
def test_a_text_with_no_token_the_model_reads_is_refused_not_labelled(tiny_bert, tmp_path, capsys, text):
    """predict and explain refuse, in one line naming the text, a text the tokenizer gives no token of its own
    (control characters, a lone combining mark, U+FFFD): the model would label [CLS][SEP] as if it had read it."""
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    model = save_checkpoint(build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["neg", "pos"]),
                            tmp_path / "m", load_tokenizer(tiny_bert), extra={"task": "csv", "label_names": ["neg", "pos"]})
    capsys.readouterr()  # the model's build
    assert main(["predict", "--model", str(model), "good", text]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnkit predict: error: text 2 of the command line (") and "holds no token the model can read" in err
    assert len(err.splitlines()) == 1
    assert main(["explain", "--model", str(model), text, "--output", str(tmp_path / "x.png")]) == 2
    assert "holds no token the model can read" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_an_empty_second_text_of_a_pair_is_called_empty(saved_classifier):
    """An empty side of a pair was refused as holding "only control characters, combining marks or replacement
    characters?" (sweep 2026-11-27g): it is called empty."""
    from attnkit.analysis.inference import load_for_inference, predict_logits

    _, model, tok = load_for_inference(saved_classifier)
    with pytest.raises(ValueError, match=r"^the second text of pair 2 is empty: a model cannot label it$"):
        predict_logits(model, tok, ["good film", "bad plot"], ["a film", "  "], progress=False)


def test_a_text_of_unknown_words_only_is_labelled_and_said(tiny_bert, tmp_path, capsys, caplog):
    """A text the tokenizer reads as [UNK] alone (emoji, a very long word) was labelled without a word: it is
    labelled (a file of texts is not stopped by one), and one line says which texts read as nothing but [UNK]."""
    import json

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    tok = load_tokenizer(tiny_bert)
    model = save_checkpoint(build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["neg", "pos"]),
                            tmp_path / "m", tok, extra={"task": "csv", "label_names": ["neg", "pos"]})
    texts = ["good film", "\U0001f600 \U0001f44d", "\U0001f600"]
    assert [set(tok(t, add_special_tokens=False)["input_ids"]) == {tok.unk_token_id} for t in texts] == [False, True, True]
    capsys.readouterr()
    assert main(["predict", "--model", str(model), *texts]) == 0
    out = capsys.readouterr().out
    assert [json.loads(line)["text"] for line in out.splitlines()] == texts  # every text labelled
    said = [r.getMessage() for r in caplog.records if "unknown words" in r.getMessage()]
    assert said == [f"2 texts read as unknown words only ({tok.unk_token}; the first: text 2, {texts[1]!r}): their labels "
                    "say nothing about their words"]
    caplog.clear()
    assert main(["predict", "--model", str(model), "good film"]) == 0
    assert not [r for r in caplog.records if "unknown words" in r.getMessage()]
    assert main(["explain", "--model", str(model), texts[2], "--output", str(tmp_path / "x.png")]) == 0
    assert "the text reads as unknown words only" in capsys.readouterr().err and (tmp_path / "x.png").is_file()


def test_texts_whose_control_characters_join_words_are_labelled_and_said_once(saved_classifier, tmp_path, capsys, caplog):
    """An ESC, BEL or form feed inside a text was dropped by the tokenizer without a word, joining the words around it
    ("a<ESC>delight" read as "adelight"): every text is still labelled (a NUL in a --file is refused: a damaged or
    UTF-16 file), and one line says how many texts hold such
    characters, naming the first by where it was given (the command line, or the --file's line)."""
    from attnkit.analysis.inference import load_for_inference, predict_texts

    f = tmp_path / "texts.txt"
    f.write_text("good film\na\x1bdelight\nbad \x07 film\nthe\x0cplot\n", encoding="utf-8")  # (line 3: nothing joined)
    capsys.readouterr()
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "good film", "--file", str(f)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["good film", "good film", "a\x1bdelight", "bad \x07 film", "the\x0cplot"]
    said = [r.getMessage() for r in caplog.records if "control characters" in r.getMessage()]
    assert said == [f"2 texts hold control characters that the tokenizer drops, joining the words on either side (the "
                    f"first: {f}, line 2, 'a\\x1bdelight': U+001B at character 2, read as 'adelight'): they are labelled "
                    "as read; write spaces in their place to keep the words apart"]
    caplog.clear()
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "good film", "bad \x07 film"]) == 0
    assert not [r for r in caplog.records if "control characters" in r.getMessage()]
    assert main(["explain", "--model", str(saved_classifier), "--threads", "1", "a\x07delight", "--output",
                 str(tmp_path / "x.png")]) == 0
    said = [r.getMessage() for r in caplog.records if "control characters" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("1 text holds control characters that the tokenizer drops") and \
        "(the text to explain, 'a\\x07delight': U+0007 at character 2, read as 'adelight')" in said[0], said
    assert (tmp_path / "x.png").is_file()
    caplog.clear()
    _, model, tok = load_for_inference(saved_classifier)  # the Python API says it too
    assert len(predict_texts(model, tok, ["fine", "good\x1bfilm"])) == 2
    said = [r.getMessage() for r in caplog.records if "control characters" in r.getMessage()]
    assert len(said) == 1 and "(text 2, 'good\\x1bfilm': U+001B at character 5, read as 'goodfilm')" in said[0], said


@pytest.mark.parametrize("target", ["model/config.json", ".attnkit-run.json", "run_config.json", "metrics.json"])
def test_an_output_never_replaces_the_files_of_another_run(run, finished, data, tmp_path, capsys, target):
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    before = (other / target).read_bytes()
    for argv in (["evaluate", "--model", str(run), "--data-dir", str(data), "--output", str(other / target)],
                 ["predict", "--model", str(run), "good film", "--output", str(other / target)]):
        capsys.readouterr()
        assert main(argv) == 2
        own = "/" not in target  # the other run's own record at its top, or a file of its model
        said = ("is the name of attnkit's record of a run" if target == ".attnkit-run.json"  # (any folder's: K)
                else "keeps of itself" if own else "is a file of the attnkit run")
        only_stderr_line(capsys, str(other / target), said)
        assert (other / target).read_bytes() == before


def test_attnkits_bookkeeping_files_are_never_an_output(user_run, data, tmp_path, capsys):
    """`predict --output po/.attnkit-outputs.json` wrote the predictions where the folder's ledger lives, and the ledger
    then replaced them (its other entries lost); `evaluate --output r/.attnkit-run.json` wrote metrics under a run
    record's name (sweep 2026-11-28p K): attnkit's bookkeeping names are refused as any output, in one line."""
    po = tmp_path / "po"
    po.mkdir()
    assert main(["predict", "--model", str(user_run), "--output", str(po / "a.jsonl"), "good film"]) == 0
    ledger = (po / ".attnkit-outputs.json").read_text()
    for argv, name, what in (
            (["predict", "good film", "--output", f"{po}/.attnkit-outputs.json"], ".attnkit-outputs.json", "ledger of the outputs in a folder"),
            (["evaluate", "--data-dir", str(data), "--output", f"{tmp_path}/fr/.attnkit-run.json"], ".attnkit-run.json", "record of a run"),
            (["predict", "good film", "--output", f"{tmp_path}/.attnkit.lock"], ".attnkit.lock", "lock on a run folder"),
            (["layer-weights", "--data-dir", str(data), "--output", f"{tmp_path}/.attnkit-files.png"], ".attnkit-files.json",
             "list of a model folder's files")):
        assert main([argv[0], "--model", str(user_run), *argv[1:]]) == 2, argv
        only_stderr_line(capsys, f"{name} is the name of attnkit's {what}; name another file")
    assert (po / ".attnkit-outputs.json").read_text() == ledger and not (tmp_path / "fr").exists()


def test_an_unknown_split_is_quoted(saved_classifier, data, capsys):
    """`--split " test"` was refused as 'task csv has no  test split': the stray space unseen (sweep 2026-11-28s BE)."""
    for command in ("predict", "evaluate"):
        assert main([command, "--model", str(saved_classifier), "--task", "csv", "--data-dir", str(data), "--split", " test"]) == 2
        only_stderr_line(capsys, "task csv has no split ' test' (it has train, validation")


def test_predict_does_not_replace_an_existing_file_of_another_kind(user_run, tmp_path, capsys):
    """`predict --output copy-of-train.csv` replaced the csv with one JSON line, without a word (sweep s23f)."""
    mine = tmp_path / "train copy.csv"
    mine.write_text("text,label\ngood,1\n")
    assert main(["predict", "--model", str(user_run), "--output", str(mine), "good film"]) == 2
    only_stderr_line(capsys, "exists and is not a JSON lines file (its name ends in .csv")
    assert mine.read_text() == "text,label\ngood,1\n"
    assert main(["predict", "--model", str(user_run), "--output", str(tmp_path / "p.jsonl"), "good film"]) == 0


@pytest.mark.parametrize("argv,link", [
    (["predict", "good film", "--output", "{link}"], "p.jsonl"),
    (["evaluate", "--data-dir", "{data}", "--output", "{link}"], "m.json"),
    (["explain", "good film", "--output", "{link}"], "h.png"),
    (["explain", "good film", "--output", "{tmp}/h.svg", "--html", "{link}"], "page.html"),
    (["explain", "good film", "--output", "{tmp}/h.svg", "--stats", "{link}"], "s.json"),
    (["words", "--data-dir", "{data}", "--min-count", "1", "--output", "{link}"], "w.png"),
    (["faithfulness", "--data-dir", "{data}", "--max-examples", "2", "--output", "{link}"], "f.json"),
])
def test_an_output_named_as_a_link_to_a_file_of_another_kind_is_refused(user_run, data, tmp_path, capsys, argv, link):
    """`--output out.png` where out.png is a link to the user's data.csv: the write went through the link and the csv
    became a chart (or JSON), without a word (sweep s24). Refused in one line naming the link and its target; the
    file stays byte for byte."""
    mine = tmp_path / "mine.csv"
    mine.write_text("text,label\ngood,1\n")
    (tmp_path / link).symlink_to(mine)
    fill = {"link": str(tmp_path / link), "tmp": str(tmp_path), "data": str(data)}
    assert main([argv[0], "--model", str(user_run), *(x.format(**fill) for x in argv[1:])]) == 2
    only_stderr_line(capsys, f"is a link to {mine}, whose name does not end in .")
    assert mine.read_text() == "text,label\ngood,1\n"


def test_faithfulness_output_must_be_named_json(user_run, data, tmp_path, capsys):
    """`faithfulness --output data.csv` replaced the user's csv by the JSON report (sweep s24); a link to a JSON file is
    written through, as every output's link to a file of its own kind."""
    mine = tmp_path / "data.csv"
    mine.write_text("text,label\ngood,1\n")
    assert main(["faithfulness", "--model", str(user_run), "--data-dir", str(data), "--max-examples", "2", "--output", str(mine)]) == 2
    only_stderr_line(capsys, f"--output {mine}: the measures file must end in .json, got 'data.csv'")
    assert mine.read_text() == "text,label\ngood,1\n"
    real = tmp_path / "real.json"
    assert main(["faithfulness", "--model", str(user_run), "--data-dir", str(data), "--max-examples", "2", "--output", str(real)]) == 0
    (tmp_path / "via.json").symlink_to(real)
    assert main(["faithfulness", "--model", str(user_run), "--data-dir", str(data), "--max-examples", "2", "--output",
                 str(tmp_path / "via.json"), "--plot", str(tmp_path / "c2.png")]) == 0
    assert (tmp_path / "via.json").is_symlink() and '"comprehensiveness"' in real.read_text()
