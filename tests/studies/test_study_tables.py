"""Every committed study table re-renders, byte for byte, from its committed records; and the numbers each study's
README quotes are in that study's rendered tables."""

import re
from pathlib import Path

import pytest

from studies.tables import ROOT, tables

TABLES = tables()


def test_every_study_table_is_registered():
    assert len(TABLES) >= 7
    for path in TABLES:
        assert path.is_file(), path


@pytest.mark.parametrize("path", sorted(TABLES), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_committed_table_re_renders_from_its_committed_records_byte_for_byte(path):
    rendered = TABLES[path]()
    committed = path.read_text()
    assert rendered == committed, (f"{path.relative_to(ROOT)} is not what its records render: run "
                                   "`python -m studies.tables` and commit the table (or the records)")


def _norm(text: str) -> str:
    """Signs and spacing as the tables print them: "−0.9" as "-0.9", "+1.2" as "1.2", "t = 3.0" as "t=3.0"."""
    text = text.replace("−", "-").replace("\u2212", "-")
    text = re.sub(r"\b([tp]) = ", r"\1=", text)
    return re.sub(r"(?<![\w.])\+(?=\d)", "", text)


#: a quoted statistic: "mean ± sd", "t=..." or "p=..."
QUOTED = re.compile(r"-?\d+(?:\.\d+)? ± \d+(?:\.\d+)?|\bt=-?\d+\.\d|\bp=<?\d\.\d+")


def quoted_numbers(readme: str) -> set[str]:
    return set(QUOTED.findall(_norm(readme)))


def test_quoted_numbers_are_found_by_the_check():
    text = "SemEval −0.7 ± 0.2 (0/3, t = −6.0, p = 0.03) and +1.2 ± 1.3; 12 runs"
    assert quoted_numbers(text) == {"-0.7 ± 0.2", "t=-6.0", "p=0.03", "1.2 ± 1.3"}


STUDY_READMES = sorted(p for p in (ROOT / "studies").glob("*/README.md"))


@pytest.mark.parametrize("readme", STUDY_READMES, ids=lambda p: p.parent.name)
def test_every_statistic_a_study_readme_quotes_is_in_its_rendered_tables(readme):
    folder = readme.parent
    rendered = [p for p in TABLES if folder in p.parents]
    if not rendered:
        pytest.skip(f"{folder.name}: no registered table here (another engineer's study)")
    text = _norm("\n".join(p.read_text() for p in sorted(folder.rglob("*.md")) if p != readme))
    # also without the sign the tables give a positive mean ("+1.2 ± 0.4" prints as "+1.2", normalised to "1.2")
    missing = sorted(q for q in quoted_numbers(readme.read_text()) if q not in text)
    assert not missing, f"{readme.relative_to(ROOT)} quotes numbers its tables do not hold: {missing}"


def test_every_statistic_the_studies_index_and_the_readme_quote_is_in_a_rendered_table():
    text = _norm("\n".join(p.read_text() for p in sorted(TABLES)))
    for readme in (ROOT / "studies" / "README.md", ROOT / "README.md"):
        if not readme.is_file():
            continue
        # the format examples of studies.stats are not findings
        quoted = {q for q in quoted_numbers(readme.read_text()) if q not in {"1.2 ± 0.4", "t=3.0", "p=0.09"}}
        missing = sorted(q for q in quoted if q not in text)
        assert not missing, f"{readme.relative_to(ROOT)} quotes numbers no rendered table holds: {missing}"



# ---------------------------------------------------------------------------------------------------------------------
# Numbers tied to their rows: a statistic a README quotes must be the statistic of one rendered row that also names the
# set and the method the README names with it, and carries the interval, t, p, seed count and verdict quoted with it.

VERDICT = re.compile(r"\b(holds|reversed|level|undecided|too few seeds)\b")
STAT = re.compile(r"(?<![\w.\-\[])(-?\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)(?![\d.])")
INTERVAL = re.compile(r"\[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]")
#: the sets, each with the names READMEs and tables give it (case-insensitive, whole words); "pooled" rows are a set
SETS = {
    "SST-2": ("SST-2", "sst2-ptb", "sst2"), "SST-1": ("SST-1", "sst5-phrases", "sst5"),
    "SenTube-A": ("SenTube-A", "sentube-auto"), "SenTube-T": ("SenTube-T", "sentube-tablets"),
    "SemEval-2013": ("SemEval-2013", "semeval2013", "SemEval"), "Rotten Tomatoes": ("Rotten Tomatoes", "rotten-tomatoes"),
    "RTE": ("RTE",), "MRPC": ("MRPC",), "CoLA": ("CoLA",), "HANS": ("HANS", "MNLI", "mnli-devsplit"), "pooled": ("pooled",),
}
#: the methods, by the name the rendered rows print, each with the names READMEs give it (case-sensitive)
METHODS = {
    "entmax15": ("entmax15", "1.5-entmax"),
    "entmax15-last": ("entmax15-last", "last layer only", "last-layer recipe", "last-layer rows", "the recipe",
                      "recipe faithful", "--sparse-layers last"),
    "entmax15+alpha-warmup": ("entmax15+alpha-warmup", "1.5-entmax from softmax", "the warm-up", "--alpha-warmup"),
    "entmax15-last+alpha-warmup": ("entmax15-last+alpha-warmup",),
    "alpha-entmax-learned": ("alpha-entmax-learned", "α learned", "learned α", "α-entmax"),
    "adapted-entmax15": ("adapted-entmax15", "adapted 1.5-entmax", "Adapted 1.5-entmax"),
    "adapted-softmax": ("adapted-softmax", "adapted softmax", "Adapted softmax"),
    "adapted-entmax15+distill": ("adapted-entmax15+distill", "Distilling", "distillation"),
    "SSAF": ("SSAF", "sparsegen-lin", "Sparsegen-lin"),
    "SSAF+lam-warmup": ("SSAF+lam-warmup", "lam warm-up", "--lam-warmup"),
    "SSAF+learned-lam": ("SSAF+learned-lam", "lam learned per layer"),
    "SSAF+learned-lam-fast": ("SSAF+learned-lam-fast", "lam on its own lr"),
    "SSAF(Np)": ("SSAF(Np)",),
    "SesameBERT": ("SesameBERT",), "Np": ("Np",),
    "SesameBERT+sparsegen-lin": ("SesameBERT+sparsegen-lin", "SesameBERT + sparsegen-lin"),
    "MiniSA": ("MiniSA",), "MiniSSA": ("MiniSSA",), "MiniNTA": ("MiniNTA",),
}
BLUR = re.compile(r"\bblur-(?:value|context)-\d+(?:\.\d+)?\b")
#: a name right after one of these is the baseline of a difference ("1.5-entmax − SSAF", "against adapted softmax")
BASELINE_BEFORE = re.compile(r"(?:-|−|\bagainst|\bover|\bminus|\bthan)\s*$")
SEEDS = re.compile(r"\b(\d+) (?:seeds|pairs)\b")


def _set_mentions(text: str) -> list[tuple[int, str]]:
    """(end position, set) of every set named in ``text``."""
    out = []
    for name, aliases in SETS.items():
        for a in aliases:
            out += [(m.end(), name) for m in re.finditer(rf"(?<![\w-]){re.escape(a)}(?![\w])", text, re.I)]
    return out


def _method_mentions(text: str) -> list[tuple[int, int, str]]:
    """(end, start, method) of every method named in ``text`` that is not the baseline of a difference."""
    out = []
    for name, aliases in METHODS.items():
        for a in aliases:
            for m in re.finditer(rf"(?<![\w+-]){re.escape(a)}(?![\w+(]|-\w)", text):
                if not BASELINE_BEFORE.search(text[:m.start()]):
                    out.append((m.end(), m.start(), name))
    out += [(m.end(), m.start(), m.group()) for m in BLUR.finditer(text) if not BASELINE_BEFORE.search(text[:m.start()])]
    return out


def _nearest_set(*texts: str) -> str | None:
    """The set named last in the first of ``texts`` (nearest scope first) that names one."""
    for text in texts:
        found = _set_mentions(text)
        if found:
            return max(found)[1]
    return None


def _nearest_method(text: str) -> str | None:
    found = _method_mentions(text)
    return max(found, key=lambda x: (x[0], -x[1]))[2] if found else None


def _row_has_method(row: str, method: str) -> bool:
    return re.search(rf"(?<![\w+-]){re.escape(method)}(?![\w+(]|-\w)", row) is not None


def _window(after: str, inside: bool) -> str:
    """The text a quote's own interval, t, p, seed count and verdict are read from: up to the next statistic, a ";" at
    its own level, or (for a quote inside parentheses) the parenthesis that closes around it."""
    depth = 0
    for i, ch in enumerate(after):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0 and inside:
                return after[:i]
            depth = max(depth, 0)
        elif ch == "±" or (ch == ";" and depth == 0):
            return after[:i]
    return after


def _back(before: str) -> str:
    """The stretch before a quote that may name its verdict or seed count: since the last ";", ")" or sentence end."""
    cut = max(before.rfind(";"), before.rfind(")"), before.rfind(". "))
    return before[cut + 1:]


def _attrs(after: str, before: str = "", inside: bool = False) -> dict:
    """What a quote says about itself: its interval, t, p, seeds won of all (k/n) or seed count, and verdict, read in
    :func:`_window` after it, and for the verdict and seed count, where it says none there, in :func:`_back` before it."""
    window = _window(after, inside)
    out = {}
    m = re.match(r"\s*\[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]", window)
    rest = window[m.end():] if m else window
    if m:
        out["ci"] = f"[{m.group(1)}, {m.group(2)}]"
    for key, rx in (("t", r"\bt=(-?[\d.]+\d|—|∞|-∞)"), ("p", r"\bp=(<?[\d.]+\d)")):
        m = re.search(rx, rest)
        if m:
            out[key] = m.group(1)
    m = re.search(r"\((\d+)/(\d+)[, ]", rest)
    bare = re.match(r"\s*\((\d+)\)", rest)  # "55.8 ± 0.4 (3)": the seed count
    own = re.match(r"\s*\([^()]*\)", rest)  # the quote's own parenthesis, else (inside one) the rest of it
    seeds = SEEDS.search(own.group() if own else rest if inside else "") or (list(SEEDS.finditer(_back(before))) or [None])[-1]
    if m:
        out["won"], out["n"] = m.group(1), int(m.group(2))
    elif bare:
        out["n"] = int(bare.group(1))
    elif seeds:
        out["n"] = int(seeds.group(1))
    v = VERDICT.search(window) or (list(VERDICT.finditer(_back(before))) or [None])[-1]
    if v:
        out["verdict"] = v.group(1)
    return out


def _inside(before: str) -> bool:
    """Whether a quote stands inside parentheses opened before it (in its sentence or cell)."""
    return before.count("(") > before.count(")")


def _row_seed_count(row: str) -> int | None:
    m = re.search(r"\b(\d+) pairs\b", row)
    if m:
        return int(m.group(1))
    m = re.search(r"\|\s*(\d+(?:,\s?\d+)+)\s*\|", row)
    return len(m.group(1).split(",")) if m else None


def rendered_rows() -> list[tuple[str, str]]:
    """Every line of every registered table that holds a statistic, normalised, with its context (the table's title
    and the section it is in)."""
    rows = []
    for path in sorted(TABLES):
        title = section = ""
        for line in _norm(path.read_text()).splitlines():
            if line.startswith("# "):
                title = line
            elif line.startswith("#"):
                section = line
            elif "±" in line or INTERVAL.search(line):
                rows.append((line, f"{title} {section}"))
    return rows


def _found_in(row: str, ctx: str, anchor: str, kind: str, want: dict, set_: str | None, method: str | None) -> bool:
    if set_ and not any(re.search(rf"(?<![\w-]){re.escape(a)}(?![\w])", f"{ctx} {row}", re.I) for a in SETS[set_]):
        return False
    if method and not _row_has_method(row, method):
        return False
    rx = STAT if kind == "stat" else INTERVAL
    for m in rx.finditer(row):
        if m.group() != anchor:
            continue
        got = _attrs(row[m.end():])
        if "n" not in got:
            n = _row_seed_count(row)
            if n is not None:
                got["n"] = n
        if all(got.get(k) == v for k, v in want.items() if k != "n") and ("n" not in want or got.get("n") in (None, want["n"])):
            return True
    return False


def _clean(text: str) -> str:
    """README text as the check reads it: code blocks, the rendered tables MiniBERT's README embeds, link targets and
    code spans of more than one word (commands, format examples) left out; one-word code spans (method names) kept."""
    text = re.sub(r"<!-- tables:begin -->.*?<!-- tables:end -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"^(    |\t).*$", "", text, flags=re.M)  # indented code
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", lambda m: "" if "/" in m.group(1) or ".md" in m.group(1) else m.group(1), text)
    text = re.sub(r"`([^`]*)`", lambda m: m.group(1) if " " not in m.group(1) and "/" not in m.group(1) else " ", text)
    return _norm(text)


def _scopes(text: str):
    """(scope before, scope after, fallbacks) of each stretch a quote is read in: a table row (its cells before the
    quote's cell and the header up to its column before it), else a sentence, with the paragraph and the heading
    above as fallbacks for the set."""
    heading, header = "", None
    for block in re.split(r"\n\s*\n|\n(?=\s*[-*] )", text):
        lines = block.splitlines()
        if lines and lines[0].startswith("#"):
            heading = lines[0]
            lines = lines[1:]
        header = None
        prose = []
        for i, line in enumerate(lines):
            if line.startswith("|"):
                if header is None:
                    header = [c.strip() for c in line.strip("|").split("|")]
                    continue
                if set(line) <= set("|-: "):
                    continue
                cells = line.strip().strip("|").split("|")
                for j, cell in enumerate(cells):
                    before = " | ".join(cells[:j]) + " | " + " | ".join(header[:j + 1] if j < len(header) else header) + " | "
                    yield before, cell, " | ".join(cells[j + 1:]), " ".join(prose), heading
            else:
                prose.append(line)
        para = " ".join(prose)
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[])", para):
            yield "", sentence, "", para[:para.find(sentence)], heading


def tied_quote_problems(readme_text: str, rows: list[tuple[str, str]]) -> list[str]:
    """Each statistic of ``readme_text`` ("mean ± sd", or an interval "[lo, hi]" on its own) that no rendered row
    holds with the set, method, interval, t, p, seed count and verdict quoted with it."""
    problems = []
    for before, cell, rest, para, heading in _scopes(_clean(readme_text)):
        anchors = [(m, "stat") for m in STAT.finditer(cell)]
        stat_spans = [m.span() for m, _ in anchors]
        anchors += [(m, "interval") for m in INTERVAL.finditer(cell)
                    if not any(a <= m.start() <= b + 2 for a, b in stat_spans)]  # an interval of its own
        anchors.sort(key=lambda a: a[0].start())
        ends = [0]
        for m, kind in anchors:
            prev, ends = ends[-1], ends + [m.end()]
            if kind == "stat" and m.group() in FORMAT_EXAMPLES:
                continue
            pre = before + cell[:m.start()]
            after = cell[m.end():] + (" | " + rest if rest else "")
            want = _attrs(after, cell[prev:m.start()], _inside(cell[:m.start()]))
            if kind == "interval":
                want.pop("ci", None)
            set_ = _nearest_set(pre, _window(after, _inside(cell[:m.start()]))[:40], para, heading)
            method = _nearest_method(pre)
            if set_ is None:
                problems.append(f"{m.group()}: no set named with it ({cell.strip()[:100]!r})")
                continue
            if not any(_found_in(row, ctx, m.group(), kind, want, set_, method) for row, ctx in rows):
                problems.append(f"{m.group()} ({set_}, {method}, {want}): no rendered row has it ({cell.strip()[:100]!r})")
    return problems


#: the format examples of studies.stats (in studies/README.md): not findings
FORMAT_EXAMPLES = {"1.2 ± 0.4"}
READMES = [ROOT / "README.md", ROOT / "studies" / "README.md", *STUDY_READMES, ROOT / "docs" / "usage.md"]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_statistic_a_readme_quotes_is_tied_to_its_rendered_row(readme):
    problems = tied_quote_problems(readme.read_text(), rendered_rows())
    assert not problems, f"{readme.relative_to(ROOT)}:\n" + "\n".join(problems)


def _table_with(readme: Path, needle: str) -> tuple[str, str]:
    """The header (with its separator) of the README table that holds the row containing ``needle``, and that row."""
    lines = readme.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if needle in line)
    top = i
    while top > 0 and lines[top - 1].startswith("|"):
        top -= 1
    return "\n".join(lines[top:top + 2]), lines[i]


#: a real README row (Table 2's entmax section in studies/ssaf/README.md): SST-2, the recipe, both of its paired cells
RECIPE_ROW = "| SST-2 | 1.5-entmax in the last layer only"
#: a real README sentence (the Findings row of README.md): the recipe on SST-2, level, with its seed count
FINDINGS_ROW = "SST-2 entmax15-last −0.0 ± 0.4 [−0.6, +0.6], 4 seeds"


@pytest.mark.parametrize("mutation", [
    ("−0.0 ± 0.4 [−0.6, +0.6] (3/4,", "+0.0 ± 0.4 [+0.6, −0.6] (3/4,"),  # signs flipped (the interval's too)
    ("+0.8 ± 0.1 (3/3", "−0.8 ± 0.1 (3/3"),  # a flipped sign
    ("t = 15.5", "t = −15.5"),  # a flipped t
    ("**level**", "**undecided**"),  # another verdict
    ("**holds**", "**level**"),
    ("(3/4, t = −0.1", "(3/3, t = −0.1"),  # another seed count
    ("| SST-2 |", "| SST-1 |"),  # another set's row
    ("−0.0 ± 0.4 [−0.6, +0.6] (3/4, t = −0.1, p = 0.95), **level**",  # the number of another row (1.5-entmax's)
     "−1.4 ± 0.2 [−1.9, −1.0] (0/3, t = −14.9, p = 0.004), **reversed**"),
    ("p = 0.95", "p = 0.05"),
], ids=lambda m: f"{m[0]!r}->{m[1]!r}")
def test_the_tie_check_catches_a_mutated_readme_row(mutation):
    header, row = _table_with(ROOT / "studies" / "ssaf" / "README.md", RECIPE_ROW)
    rows = rendered_rows()
    assert tied_quote_problems(f"{header}\n{row}\n", rows) == []  # the row as committed is tied to its rendered rows
    old, new = mutation
    assert old in row, f"the README row changed; update the mutation {old!r}"
    assert tied_quote_problems(f"{header}\n{row.replace(old, new, 1)}\n", rows), f"{old!r} -> {new!r} not caught"


@pytest.mark.parametrize("mutation", [
    ("4 seeds", "3 seeds"),  # another seed count
    ("**level** with softmax's test accuracy on SST-2", "**undecided** with softmax's test accuracy on SST-2"),  # verdict
    ("SST-2 entmax15-last −0.0", "SST-2 1.5-entmax −0.0"),  # another method's row
    ("SST-2 entmax15-last −0.0", "SenTube-A entmax15-last −0.0"),  # another set's row
    ("[−0.6, +0.6], 4 seeds", "[−0.6, +0.7], 4 seeds"),  # another interval
], ids=lambda m: f"{m[0]!r}->{m[1]!r}")
def test_the_tie_check_catches_a_mutated_readme_sentence(mutation):
    header, row = _table_with(ROOT / "README.md", FINDINGS_ROW)
    rows = rendered_rows()
    assert tied_quote_problems(f"{header}\n{row}\n", rows) == []
    old, new = mutation
    assert old in row, f"the README row changed; update the mutation {old!r}"
    assert tied_quote_problems(f"{header}\n{row.replace(old, new, 1)}\n", rows), f"{old!r} -> {new!r} not caught"


def test_the_tie_check_needs_a_set_named_with_each_number():
    assert tied_quote_problems("The gain is −0.0 ± 0.4 [−0.6, +0.6] (3/4, t = −0.1, p = 0.95), **level**.", rendered_rows())
    assert not tied_quote_problems("SST-2 entmax15-last −0.0 ± 0.4 [−0.6, +0.6] (3/4, t = −0.1, p = 0.95), **level**.",
                                   rendered_rows())


def _header(md: str) -> str:
    """A rendered table's text above its first table row."""
    return md.split("\n|", 1)[0]


@pytest.mark.parametrize("name", ["ssaf_table2", "faithfulness"])
def test_a_table_header_names_the_machine_and_precision_its_records_give(name, monkeypatch):
    """Table 2's and the faithfulness table's headers read where and in what arithmetic the runs were made from the
    records (``machine``, ``precision``, ``torch_threads``): a CPU record relabelled as an H200 bf16 run changes them."""
    import studies.tables as registry

    path = (registry.SSAF_DIR if name == "ssaf_table2" else registry.FAITH_DIR) / f"{name}.md"
    records = path.with_suffix(".json")
    recs = registry._records(records)
    cpu = next(i for i, r in enumerate(recs) if r.get("machine") == "x86_64, 2 cores")
    header = _header(TABLES[path]())
    assert "x86_64, 2 cores, fp32, 1 torch thread per run" in header and "H200" not in header

    relabelled = [dict(r) for r in recs]
    relabelled[cpu].update(machine="x86_64, 16 cores, NVIDIA H200", precision="bf16")
    orig = registry._records
    monkeypatch.setattr(registry, "_records", lambda p: relabelled if p == records else orig(p))
    changed = _header(TABLES[path]())
    assert changed != header
    assert "x86_64, 16 cores, NVIDIA H200, bf16, 1 torch thread per run (1 record)" in changed
    assert "x86_64, 2 cores, fp32, 1 torch thread per run (" in changed  # the others, with their count
