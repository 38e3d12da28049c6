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
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["tokens"] == m.tokens
    w = np.array(data["weights"])
    assert w.shape == (2, 3, 5, 5) and np.allclose(w, m.weights, atol=1e-6)
    assert ((w == 0) == (m.weights == 0)).all()  # zeros stay exactly zero
    with pytest.raises(ValueError, match="must end in .html"):
        write_html(m, tmp_path / "v.png")


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
