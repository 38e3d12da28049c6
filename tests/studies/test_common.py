"""studies.common: which split a cell's test score comes from (one rule for Table 2's records and the
faithfulness study's model scores) and the settings each method trains with."""

import pytest

from studies import common


def test_a_cells_test_split():
    assert common.test_split("sst2-ptb") == "test" and common.test_split("sst2-ptb", {"validation": {}, "test": {}}) == "test"
    # GLUE's test labels are hidden: its dev set is the test, with or without a held-out part choosing the checkpoint
    assert common.test_split("cola") == "validation" and common.test_split("mrpc", {"validation": {}, "heldout": {}}) == "validation"
    # a run that scored no test split (a set without one): its dev set
    assert common.test_split("csv", {"validation": {}}) == "validation" and common.test_split("csv", {}) == "validation"


def test_a_methods_settings():
    from types import SimpleNamespace

    a = SimpleNamespace(lr=2e-5, np_lr=1e-4, np_epochs=10, np_warmup=0.1)
    recipe = common.method_settings("entmax15-last", "sst5-phrases", a)
    assert recipe["attention"] == "entmax15" and recipe["sparse_layers"] == "last" and "alpha_warmup" not in recipe
    # the recipe with alpha's warm-up: the same layers, alpha from 1 (softmax) to 1.5 over the first 10% of the steps
    warm = common.method_settings("entmax15-last+alpha-warmup", "sst5-phrases", a)
    assert warm == recipe | {"alpha_warmup": common.ALPHA_WARMUP}
    assert "sparse_layers" not in common.method_settings("entmax15+alpha-warmup", "sst5-phrases", a)
    with pytest.raises(SystemExit, match="unknown method"):
        common.method_settings("entmax15-first", "sst5-phrases", a)
