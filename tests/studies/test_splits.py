"""Which split a study cell's test score comes from (studies.common.test_split): one rule for Table 2's records and the
faithfulness study's model scores."""

from studies import common


def test_a_cells_test_split():
    assert common.test_split("sst2-ptb") == "test" and common.test_split("sst2-ptb", {"validation": {}, "test": {}}) == "test"
    # GLUE's test labels are hidden: its dev set is the test, with or without a held-out part choosing the checkpoint
    assert common.test_split("cola") == "validation" and common.test_split("mrpc", {"validation": {}, "heldout": {}}) == "validation"
    # a run that scored no test split (a set without one): its dev set
    assert common.test_split("csv", {"validation": {}}) == "validation" and common.test_split("csv", {}) == "validation"
