"""Checkpoints that describe themselves: model_type "attnkit", Auto classes and
pipeline with attnkit imported, trust_remote_code without it, re-saving keeps all of it, old checkpoints load."""

import json
import subprocess
import sys

import pytest
import torch

from attnkit.attention.spec import AttentionSpec, apply_spec
from attnkit.models.build import build_classifier, build_qa_model
from attnkit.models.checkpoint import load_model, load_tokenizer, save_checkpoint
from attnkit.models.modeling_attnkit import CODE_FILES
from attnkit.models.pooling import HeadSpec

pytestmark = pytest.mark.slow

SENTS = ["a great movie and a really good story", "bad", "it was not fun but the actor was superb"]

MODELS = {
    "plain": dict(spec=AttentionSpec("sparsegen-lin", -2.0)),
    "sesame": dict(spec=AttentionSpec("sparsemax", blur="context"), head=HeadSpec("weighted", se=True, se_ratio=2)),
    "learned-lam": dict(spec=AttentionSpec("sparsegen-lin", 0.5, learned="lam")),
}


def _logits(model, tok, texts=SENTS):
    model.eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, return_tensors="pt")).logits


def _save(tiny_bert, tmp_path, kind):
    kw = MODELS[kind]
    torch.manual_seed(0)
    model = build_classifier(tiny_bert, 2, kw["spec"], head=kw.get("head"), label_names=["neg", "pos"])
    with torch.no_grad():  # a trained-looking head, and lam moved away from its start
        model.classifier.weight.normal_(0, 1.0)
        for n, p in model.named_parameters():
            if n.endswith("attnkit_lam_rho"):
                p.add_(torch.linspace(-0.5, 0.5, p.numel()))
    d = save_checkpoint(model, tmp_path / kind, load_tokenizer(tiny_bert))
    return model, d


def _run(code: str, *args, block_attnkit: bool = False):
    pre = "import sys\n" + ("sys.modules['attnkit'] = None\n" if block_attnkit else "")  # import attnkit -> ImportError
    r = subprocess.run([sys.executable, "-c", pre + code, *map(str, args)], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin", "HOME": "/tmp",
                            "OMP_NUM_THREADS": "1", "HF_HOME": str(args[-1]) + "_hf"})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("kind", list(MODELS))
def test_saved_config_describes_the_model(tiny_bert, tmp_path, kind):
    _, d = _save(tiny_bert, tmp_path, kind)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "attnkit" and cfg["base_model_type"] == "bert"
    assert cfg["auto_map"]["AutoModelForSequenceClassification"] == "modeling_attnkit.AttnkitForSequenceClassification"
    for f in CODE_FILES:
        assert (d / f).is_file(), f


@pytest.mark.parametrize("kind", list(MODELS))
def test_auto_classes_and_pipeline_give_attnkits_model(tiny_bert, tmp_path, kind):
    from transformers import AutoModelForSequenceClassification, pipeline

    model, d = _save(tiny_bert, tmp_path, kind)
    tok = load_tokenizer(d)
    ours = _logits(load_model(d), tok)
    assert torch.allclose(ours, _logits(model, tok), atol=1e-6)
    auto = AutoModelForSequenceClassification.from_pretrained(d)
    assert torch.equal(_logits(auto, tok), ours)
    pipe = pipeline("text-classification", model=str(d), top_k=None)
    probs = torch.softmax(ours, -1)
    for i, rows in enumerate(pipe(SENTS)):
        got = {r["label"]: r["score"] for r in rows}
        assert got["pos"] == pytest.approx(float(probs[i, 1]), abs=1e-6)


@pytest.mark.parametrize("kind", list(MODELS))
def test_trust_remote_code_loads_it_without_attnkit(tiny_bert, tmp_path, kind):
    model, d = _save(tiny_bert, tmp_path, kind)
    want = _logits(model, load_tokenizer(d))
    code = (
        "import json, torch\n"
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
        "m = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "with torch.no_grad():\n"
        "    out = m(**tok(json.loads(sys.argv[2]), padding=True, return_tensors='pt'), output_attentions=True)\n"
        "assert sys.modules.get('attnkit') is None\n"
        "print(json.dumps({'logits': out.logits.tolist(), 'zeros': float((out.attentions[0] == 0).float().mean()),\n"
        "                  'impl': m.config._attn_implementation}))\n"
    )
    got = json.loads(_run(code, d, json.dumps(SENTS), tmp_path, block_attnkit=True).strip().splitlines()[-1])
    assert got["impl"] == "attnkit"
    assert torch.allclose(torch.tensor(got["logits"]), want, atol=1e-5)
    if kind != "plain":  # the map is sparse (padding alone gives zeros in every kind)
        assert got["zeros"] > 0


def test_resaving_with_plain_save_pretrained_keeps_the_guard(tiny_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification

    model, d = _save(tiny_bert, tmp_path, "plain")
    again = AutoModelForSequenceClassification.from_pretrained(d)
    again.save_pretrained(tmp_path / "resaved")
    cfg = json.loads((tmp_path / "resaved" / "config.json").read_text())
    assert cfg["model_type"] == "attnkit" and cfg["attnkit"]["attention"] == "sparsegen-lin" and "auto_map" in cfg
    assert all((tmp_path / "resaved" / f).is_file() for f in CODE_FILES)
    assert not [p.name for p in (tmp_path / "resaved").iterdir() if ".tmp-" in p.name]
    # onto a file, or a path inside one: refused naming the file, before anything (it failed on a code file's name,
    # 'afile.txt/modeling_attnkit.py': sweep 2026-11-28r AG); the file as it was
    mine = tmp_path / "afile.txt"
    mine.write_text("mine")
    for target in (mine, mine / "sub"):
        with pytest.raises(ValueError, match=f"save_pretrained: {target} cannot be a folder: {mine} is a file"):
            again.save_pretrained(target)
    assert mine.read_text() == "mine"
    code = (
        "from transformers import AutoModelForSequenceClassification as A\n"
        "try:\n"
        "    A.from_pretrained(sys.argv[1], trust_remote_code=False)\n"
        "except ValueError as e:\n"
        "    assert 'trust_remote_code' in str(e)\n"
        "    print('refused')\n"
    )
    assert "refused" in _run(code, tmp_path / "resaved", tmp_path, block_attnkit=True)


@pytest.mark.parametrize("how", ["attnkit.register()", "import attnkit.models", "transformers first", "attnkit first"])
def test_registration_is_explicit_and_each_way_registers_everything(tiny_bert, tmp_path, how):
    """``attnkit.register()``, ``import attnkit.models``, or ``import attnkit`` before or after transformers: each
    registers the model type, so the Auto classes load attnkit's checkpoints as attnkit models (attnkit first: refused
    with transformers' "pass trust_remote_code=True", sweep s23b)."""
    _, d = _save(tiny_bert, tmp_path, "plain")
    first = {"attnkit.register()": "import attnkit\nimport transformers\nattnkit.register()\n",
             "import attnkit.models": "import transformers\nimport attnkit.models\n",
             "transformers first": "import transformers\nimport attnkit\n",
             "attnkit first": "import attnkit\n"}[how]
    code = (
        first + "from transformers import AutoModelForSequenceClassification as A\n"
        "m = A.from_pretrained(sys.argv[1])\n"
        "print(type(m).__name__, m.config._attn_implementation)\n"
    )
    assert _run(code, d, tmp_path).split() == ["AttnkitBertForSequenceClassification", "attnkit"]


def test_import_attnkit_alone_registers_nothing_and_loads_no_torch():
    import subprocess
    import sys

    code = "import sys, attnkit\nprint(sorted(m for m in ('torch', 'transformers', 'attnkit.models') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr[-2000:]


def test_span_qa_model_round_trip(tiny_bert, tmp_path):
    from transformers import AutoModelForQuestionAnswering

    model = build_qa_model(tiny_bert, AttentionSpec("sparsemax"))
    tok = load_tokenizer(tiny_bert)
    with torch.no_grad():
        model.qa_outputs.weight.normal_(0, 1.0)
    d = save_checkpoint(model, tmp_path / "qa", tok)
    enc = tok(["what is good ?"], ["the movie was good"], return_tensors="pt")
    with torch.no_grad():
        want = model.eval()(**enc).start_logits
        assert torch.equal(load_model(d).eval()(**enc).start_logits, want)
        assert torch.equal(AutoModelForQuestionAnswering.from_pretrained(d).eval()(**enc).start_logits, want)


def test_checkpoints_of_earlier_attnkit_versions_still_load(tiny_bert, tmp_path):
    """Before model_type "attnkit": the encoder's own type + config.attnkit + attn_implementation in config.json."""
    from transformers import AutoModelForSequenceClassification

    spec = AttentionSpec("sparsegen-lin", -2.0)
    old = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2, attn_implementation="attnkit")
    apply_spec(old.config, spec)
    with torch.no_grad():
        old.classifier.weight.normal_(0, 1.0)
    old.save_pretrained(tmp_path / "old")
    cfg = json.loads((tmp_path / "old/config.json").read_text())
    cfg.update(attn_implementation="attnkit", attnkit=spec.to_dict())
    (tmp_path / "old/config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(tiny_bert)
    again = load_model(tmp_path / "old")
    assert json.loads((tmp_path / "old/config.json").read_text())["model_type"] == "bert"
    assert torch.allclose(_logits(again, tok), _logits(old, tok), atol=1e-6)


ARCHIVE = __import__("pathlib").Path(__file__).parents[1] / "fixtures" / "checkpoint_session9.tar.gz"


def test_a_checkpoint_saved_before_the_package_layers_still_loads(tmp_path):
    """``fixtures/checkpoint_session9.tar.gz``: a tiny BERT sparsified (sparsegen-lin, lam -2) and saved by attnkit as
    it was before the layered layout (its code files are the flat ``attention.py`` ... of then), with the logits it gave.
    Today's attnkit, the Auto class and its own saved code (trust_remote_code, attnkit blocked) all give those logits."""
    import tarfile

    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path, filter="data")
    FIXTURE = tmp_path / "checkpoint_session9"
    want = json.loads((FIXTURE / "expected.json").read_text())
    ids, mask = torch.tensor(want["input_ids"]), torch.tensor(want["attention_mask"])
    from transformers import AutoModelForSequenceClassification

    for model in (load_model(FIXTURE), AutoModelForSequenceClassification.from_pretrained(FIXTURE)):
        with torch.no_grad():
            out = model.eval()(input_ids=ids, attention_mask=mask, output_attentions=True)
        torch.testing.assert_close(out.logits, torch.tensor(want["logits"]), rtol=1e-4, atol=1e-5)
        assert int((out.attentions[0] == 0).sum()) == want["zeros_layer0"]
    code = ("import json, torch\nfrom transformers import AutoModelForSequenceClassification as A\n"
            "m = A.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
            "w = json.load(open(sys.argv[1] + '/expected.json'))\n"
            "print(json.dumps(m(input_ids=torch.tensor(w['input_ids']), attention_mask=torch.tensor(w['attention_mask'])).logits.tolist()))")
    got = json.loads(_run(code, FIXTURE, tmp_path / "remote", block_attnkit=True).strip().splitlines()[-1])
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want["logits"]), rtol=1e-4, atol=1e-5)


def test_saved_code_files_import_each_other_flat(tiny_bert, tmp_path):
    """In the package the code files sit in attention/ and models/; beside the weights they sit side by side, so the
    saved text imports them as siblings (``from .spec import``), never ``from ..attention``."""
    _, d = _save(tiny_bert, tmp_path, "plain")
    for f in CODE_FILES:
        lines = [l.strip() for l in (d / f).read_text().splitlines()]
        assert not [l for l in lines if l.startswith(("from ..", "import attnkit", "from attnkit"))], f
    assert "from .spec import" in (d / "modeling_attnkit.py").read_text()
