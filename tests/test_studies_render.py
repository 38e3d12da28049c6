"""Every committed study table re-renders, byte for byte, from its committed records; and the numbers each study's
README quotes are in that study's rendered tables (issue 38)."""

import re

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

