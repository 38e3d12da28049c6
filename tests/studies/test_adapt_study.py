"""The adapt study's record keeping and rendering (studies/adapt): the records of two lent GPUs side by side."""

from __future__ import annotations

from studies.adapt import render, run


def _train(task, method, seed, acc, machine):
    return {"kind": "train", "task": task, "method": method, "seed": seed, "test_accuracy": acc, "machine": machine}


def _adapt(seed, machine, loss):
    return {"kind": "adapt", "attention": "entmax15", "seed": seed, "machine": machine, "mlm_loss": loss}


def test_an_encoder_made_again_on_another_machine_is_kept_beside_the_first_making(tmp_path):
    path = tmp_path / "records.json"
    run.add_record(path, _adapt(1, "A", 5.0))
    run.add_record(path, _adapt(1, "B", 4.9))  # made again on another GPU: both makings stay
    run.add_record(path, _adapt(1, "B", 4.8))  # made again on the same machine: replaces that machine's record
    run.add_record(path, _train("sst2-ptb", "softmax", 1, 0.8, "A"))
    run.add_record(path, _train("sst2-ptb", "softmax", 1, 0.9, "B"))  # a cell's record is replaced wherever it ran
    recs = run.read_records(path)
    assert sorted((r["machine"], r["mlm_loss"]) for r in recs if r["kind"] == "adapt") == [("A", 5.0), ("B", 4.8)]
    assert [(r["machine"], r["test_accuracy"]) for r in recs if r["kind"] == "train"] == [("B", 0.9)]


def test_a_difference_whose_pairs_span_two_machines_is_marked_and_the_header_says_why(tmp_path):
    recs = [_train("sst2-ptb", "softmax", s, 0.80 + 0.01 * s, "A") for s in (1, 2, 3)]
    recs += [_train("sst2-ptb", "entmax15-last", s, 0.81 + 0.01 * s, "A" if s < 3 else "B") for s in (1, 2, 3)]
    recs += [_train("sentube-auto", m, s, 0.6 + 0.01 * s, "A") for m in ("softmax", "entmax15-last") for s in (1, 2, 3)]
    out = render.accuracy_table(recs)
    sst2 = next(line for line in out.splitlines() if line.startswith("| SST-2 | entmax15-last"))
    sentube = next(line for line in out.splitlines() if line.startswith("| SenTube-A | entmax15-last"))
    assert "‡" in sst2 and "‡" not in sentube
    path = tmp_path / "records.json"
    for r in recs:
        run.add_record(path, r)
    assert "two different GPUs" in render.render(path)
    for r in recs:
        r["machine"] = "A"
    path.unlink()
    for r in recs:
        run.add_record(path, r)
    text = render.render(path)
    assert "same machine" in text and "‡" not in text
