"""attnkit explain --html: a self-contained interactive page, checked in a real headless browser where one is installed."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from attnkit.analysis.explain import AttentionMaps
from attnkit.analysis.html_view import write_html

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def maps(sparse=True):
    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 5, 5))
    if sparse:
        w[w < 0.6] = 0.0
        w[..., 0] += 1e-3  # every row keeps a non-zero
    w /= w.sum(-1, keepdims=True)
    return AttentionMaps(tokens=["[CLS]", "a", "fine", "film", "[SEP]"], weights=w, attention="sparsegen-lin (lam=-2)")


def test_page_is_self_contained_and_holds_every_weight(tmp_path):
    m = maps()
    page = write_html(m, tmp_path / "v.html").read_text()
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    data = embedded(page)
    assert data["tokens"] == m.tokens
    w = dense(data)
    assert w.shape == (2, 3, 5, 5) and np.allclose(w, m.weights, atol=1e-6)
    assert ((w == 0) == (m.weights == 0)).all()  # zeros stay exactly zero
    assert all(len(i) == len(v) == np.count_nonzero(row) for layer, mw in zip(data["maps"], m.weights)
               for head, hw in zip(layer, mw) for i, v, row in zip(head["idx"], head["val"], hw))  # support lists: the non-zeros only
    with pytest.raises(ValueError, match="must end in .html"):
        write_html(m, tmp_path / "v.png")


def embedded(page: str) -> dict:
    """The JSON embedded in a page's data element."""
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))


def dense(data) -> np.ndarray:
    """The page's support lists (per layer, head and row: the keys and their weights) as a [layers, heads, L, L] array;
    a key with no stored weight is 0."""
    L = len(data["tokens"])
    w = np.zeros((len(data["maps"]), len(data["maps"][0]), L, L))
    for l, layer in enumerate(data["maps"]):
        for h, head in enumerate(layer):
            for i, (keys, vals) in enumerate(zip(head["idx"], head["val"])):
                w[l, h, i, keys] = vals
    return w


def _chromium(*args, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0"]
    return subprocess.run([BROWSER, *flags, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here: apt-get install chromium (Debian) to run the browser test")
@pytest.mark.parametrize("sparse", [True, False])
def test_page_renders_in_a_headless_browser(tmp_path, sparse):
    import matplotlib.image as mpimg

    page = write_html(maps(sparse), tmp_path / "v.html")
    profile = tmp_path / "profile"
    r = _chromium(f"--user-data-dir={profile}", "--dump-dom", page.as_uri())
    assert "rendered 2 layers x 3 heads, 5 tokens" in r.stdout, r.stderr[-2000:]
    errors = [l for l in r.stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    assert not errors, errors
    lines = int(re.search(r'id="headview"[^>]*data-lines="(\d+)"', r.stdout).group(1))
    nonzero = int((maps(sparse).weights[-1, 0] > 0).sum())
    assert lines == nonzero  # one line per non-zero weight of the default layer/head: zeros draw nothing
    shot = tmp_path / "shot.png"
    r = _chromium(f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1000,900", page.as_uri())
    assert shot.is_file(), r.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[0] >= 800 and img[..., :3].std() > 0.05  # something was drawn, not a blank page


EVIL = "<!--<script>alert(1)</script>"


def hostile_maps():
    m = maps()
    m.tokens = ["[CLS]", EVIL, "</script><b>&amp;", "a\u2028b", "[SEP]"]
    return m


def test_tokens_that_look_like_markup_stay_data(tmp_path):
    m = hostile_maps()
    page = write_html(m, tmp_path / "v.html", title=f"attnkit: {EVIL}").read_text()
    blocks = re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.S)
    assert len(blocks) == 2 and page.count("<script") == 2  # the data and the page's own program: no script of the tokens
    assert "<!--" not in page  # anywhere: neither in a script block nor in the escaped title
    assert all("<" not in b and ">" not in b for b in blocks[:1])  # the data block holds no markup at all
    assert "\\u003c!--\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in blocks[0]
    data = json.loads(blocks[0])
    assert data["tokens"] == m.tokens  # JSON.parse (here json.loads) gives every token back as it was
    assert "&lt;!--&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the title, escaped as text


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here: apt-get install chromium (Debian) to run the browser test")
def test_a_page_of_markup_tokens_renders_them_as_text(tmp_path):
    page = write_html(hostile_maps(), tmp_path / "v.html", title=EVIL)
    r = _chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri())
    assert "rendered 2 layers x 3 heads, 5 tokens" in r.stdout, r.stderr[-2000:]
    assert "&lt;!--&lt;script&gt;alert(1)&lt;/script&gt;</text>" in r.stdout  # drawn as a token's text, not run


# ----------------------------------------------------------------------------- views that scale


def sparsemax(z: np.ndarray) -> np.ndarray:
    """Sparsemax over the last axis (Martins & Astudillo, 2016): a row with exact zeros that sums to 1."""
    s = -np.sort(-z, -1)
    c = np.cumsum(s, -1)
    k = (1 + np.arange(1, z.shape[-1] + 1) * s > c).sum(-1, keepdims=True)
    return np.maximum(z - (np.take_along_axis(c, k - 1, -1) - 1) / k, 0)


def synthetic_maps(L: int, layers: int = 6, heads: int = 12, seed: int = 0) -> AttentionMaps:
    """MiniLM's shape with no model: softmax in every layer but the last, sparsemax (of random scores) in the last;
    every third token a word piece (``##``)."""
    rng = np.random.default_rng(seed)
    w = np.empty((layers, heads, L, L), np.float32)
    for l in range(layers):
        z = 2 * rng.standard_normal((heads, L, L))
        e = np.exp(z - z.max(-1, keepdims=True))
        w[l] = sparsemax(z) if l == layers - 1 else e / e.sum(-1, keepdims=True)
    tokens = ["[CLS]", *(("##" if i % 3 == 2 else "") + f"w{i}" for i in range(1, L - 1)), "[SEP]"]
    return AttentionMaps(tokens=tokens, weights=w, attention="sparsemax in the last layer (softmax in the others)",
                         sparse_layers=[layers - 1])


def _open(page, tmp_path, view=""):
    """The page's DOM once drawn in headless Chromium (``view``: the part after ``#``), with the console's errors."""
    r = _chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri() + view)
    assert 'id="status">rendered' in r.stdout, r.stderr[-2000:]
    errors = [l for l in r.stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    assert not errors, errors
    return r.stdout


def _drawn(dom: str) -> dict:
    """What the head view drew: its data attributes and, per line, the key it goes to and its opacity."""
    svg = re.search(r'<svg id="headview"[^>]*>', dom).group(0)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', svg))
    lines = [(int(y2) - 14) // 18 for y2 in re.findall(r'<line [^>]*y2="(\d+)"', dom)]
    opacity = [float(o) for o in re.findall(r'<line [^>]*stroke-opacity="([\d.]+)"', dom)]
    return {**attrs, "keys": lines, "opacity": opacity}


def test_a_long_input_is_stored_as_support_lists_under_the_budget(tmp_path):
    from attnkit.analysis.html_view import BUDGET, MASS, MIN_KEEP

    m = synthetic_maps(512)
    path = write_html(m, tmp_path / "v.html")
    page = path.read_text()
    data = embedded(page)
    dense_rows = 5 * 12 * 512  # the softmax layers' rows share what the sparse layer's weights leave of the budget
    keep = max(MIN_KEEP, (BUDGET - np.count_nonzero(m.weights[5])) // dense_rows)
    assert data["storage"]["keep"] == keep and f"at most {keep} per row" in page and "99% of the row's mass" in page
    sparse, soft = data["maps"][5][3], data["maps"][0][2]
    for i in (0, 100, 511):  # the sparse layer: exactly its non-zeros, to 6 significant digits, nothing left out
        assert sparse["idx"][i] == np.flatnonzero(m.weights[5, 3, i]).tolist() and "rest" not in sparse
        assert np.allclose(sparse["val"][i], m.weights[5, 3, i][sparse["idx"][i]], rtol=5e-6, atol=0)
        row = m.weights[0, 2, i].astype(np.float64)  # softmax: its largest weights, up to 99% of the mass or keep
        top = np.sort(row)[::-1]
        n = min(keep, int((np.cumsum(top) < MASS).sum()) + 1)
        assert sorted(soft["idx"][i]) == soft["idx"][i] and set(soft["idx"][i]) == set(np.argsort(-row)[:n].tolist())
        assert np.allclose(soft["val"][i], row[soft["idx"][i]], rtol=5e-4, atol=0)
        assert soft["rest"][i] == pytest.approx(1 - top[:n].sum(), rel=1e-3)
    digits = lambda values, n: all(v == float(f"{v:.{n}g}") for row in values for v in row)
    assert digits(sparse["val"], 6) and digits(soft["val"], 4) and digits([soft["rest"]], 4)  # rounded, as the page says
    assert path.stat().st_size <= 10_000_000


def test_word_pieces_merge_into_words():
    from attnkit.analysis.html_view import word_pieces

    assert word_pieces(["[CLS]", "a", "fine", "##st", "##s", "film", "[SEP]", "##x"]) == (
        ["[CLS]", "a", "finests", "film", "[SEP]", "x"], [0, 1, 2, 2, 2, 3, 4, 5])
    assert word_pieces(["<s>", "A", "Ġfin", "est", "Ġfilm", "</s>"]) == (["<s>", "A", "finest", "film", "</s>"], [0, 1, 2, 2, 3, 4])
    assert word_pieces(["[CLS]", "▁a", "▁fin", "est", "[SEP]"]) == (["[CLS]", "a", "finest", "[SEP]"], [0, 1, 2, 2, 3])


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here: apt-get install chromium (Debian) to run the browser test")
def test_words_and_means_are_drawn_from_the_support_lists(tmp_path):
    m = maps()
    m.tokens = ["[CLS]", "fine", "##st", "film", "[SEP]"]  # words: [CLS] finest film [SEP]
    page = write_html(m, tmp_path / "v.html")
    drawn = _drawn(_open(page, tmp_path, "#units=words&layer=mean&head=mean&token=1"))
    pieces = m.weights.mean((0, 1))[[1, 2]].mean(0)  # "finest" gives the mean over its pieces, of the mean map
    row = np.array([pieces[0], pieces[1] + pieces[2], pieces[3], pieces[4]])  # and each word receives the sum over its pieces
    assert drawn["token"] == "1" and float(drawn["row-sum"]) == pytest.approx(1, abs=1e-4)
    assert drawn["keys"] == np.flatnonzero(row).tolist() and drawn["lines"] == str(np.count_nonzero(row))
    assert np.allclose(drawn["opacity"], np.maximum(0.05, row[row > 0] / row.max()), atol=1e-3)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here: apt-get install chromium (Debian) to run the browser test")
def test_a_page_of_512_tokens_is_small_and_drawn_at_once(tmp_path):
    m = synthetic_maps(512)
    page = write_html(m, tmp_path / "v.html")
    assert page.stat().st_size <= 10_000_000  # 6 x 12 maps of 512 x 512; the page that held every weight: 155 MB
    dom = _open(page, tmp_path, "#layer=5&head=3&token=100")
    assert "rendered 6 layers x 12 heads, 512 tokens" in dom
    assert int(re.search(r'data-drawn-ms="(\d+)"', dom).group(1)) <= 5000  # from navigation to both views drawn
    drawn = _drawn(dom)
    assert drawn["token"] == "100" and drawn["keys"] == np.flatnonzero(m.weights[5, 3, 100]).tolist()
    assert int(drawn["lines"]) == np.count_nonzero(m.weights[5, 3, 100])  # one line per non-zero weight, no other
    assert dom.count("<canvas") == 7 * 13  # the model view: every layer x head and the means, as canvases
    data = embedded(page.read_text())
    drawn = _drawn(_open(page, tmp_path, "#layer=0&head=2&token=7"))  # a softmax row: its stored largest weights
    assert drawn["keys"] == data["maps"][0][2]["idx"][7] and float(drawn["row-sum"]) == pytest.approx(1, abs=1e-3)
    drawn = _drawn(_open(page, tmp_path, "#units=words&layer=0&head=mean&token=9"))  # softmax rows, merged
    stored, heads = dense(data)[0], data["maps"][0]  # layer 0's 12 heads, their rows cut to the largest weights
    held = np.array([[len(keys) for keys in h["idx"]] for h in heads])
    full = np.where(stored > 0, stored, (np.array([h["rest"] for h in heads]) / (512 - held))[..., None])  # rest: spread evenly
    gives = full.mean(0)[[13, 14]].mean(0)  # word 9 is w13 ##w14: the mean of the heads, then of its pieces' rows
    receives = np.bincount(data["word_of"], weights=gives)  # and each word receives the sum over its pieces
    keys = sorted({data["word_of"][j] for h in heads for i in (13, 14) for j in h["idx"][i]})
    assert drawn["keys"] == keys and float(drawn["row-sum"]) == pytest.approx(1, abs=1e-3)
    assert np.allclose(drawn["opacity"], np.maximum(0.05, receives[keys] / receives[keys].max()), atol=1e-3)


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no Chromium here: apt-get install chromium (Debian) to run the browser test")
def test_a_page_of_4096_tokens_still_opens(tmp_path):
    m = synthetic_maps(4096, layers=2, heads=2)
    page = write_html(m, tmp_path / "v.html")
    dom = _open(page, tmp_path, "#token=4000")
    assert "rendered 2 layers x 2 heads, 4096 tokens" in dom
    drawn = _drawn(dom)
    assert drawn["token"] == "4000" and int(drawn["lines"]) == np.count_nonzero(m.weights[1, 0, 4000])
    assert re.search(r"4096 tokens: a pixel is a block of about 42\.7 x 42\.7", dom)  # the model view, downsampled


def test_a_heatmap_of_512_tokens_labels_at_most_64_of_them(tmp_path, monkeypatch):
    import matplotlib.image as mpimg

    from attnkit.analysis import explain

    labels, save = [], explain.save_figure
    texts = lambda ticks: [t.get_text() for t in ticks]
    monkeypatch.setattr(explain, "save_figure", lambda fig, path: labels.append([texts(fig.axes[0].get_xticklabels()),
        texts(fig.axes[0].get_yticklabels()), texts(fig.axes[0].child_axes[0].get_yticklabels())]) or save(fig, path))
    m = synthetic_maps(512, layers=1, heads=1)
    path = explain.plot_attention(m, tmp_path / "one.png", layer=0, head=0)
    keys, tokens, support = labels[0]  # the keys below, the queries on the left, their support sizes on the right
    assert len(keys) == len(tokens) == len(support) == 64 and tokens[:2] == keys[:2] == ["0 [CLS]", "8 ##w8"]  # every 8th, with its place
    assert support[1] == f"|S|={np.count_nonzero(m.weights[0, 0, 8])}"
    assert max(mpimg.imread(path).shape[:2]) <= 3000  # a figure of a sane size (every token labelled: 20,000 pixels)
    explain.plot_attention(synthetic_maps(12, layers=1, heads=1), tmp_path / "short.png", layer=0, head=0)
    assert labels[1][1] == ["[CLS]", *(("##" if i % 3 == 2 else "") + f"w{i}" for i in range(1, 11)), "[SEP]"]  # short: every token
