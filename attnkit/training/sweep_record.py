"""The records `attnkit sweep` keeps in sweep.json: what it varies and the keys of each cell.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.attention.names import value_name  # noqa: F401  (the sweep's name for a value)
from attnkit.attention.normalisers import names_with
from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.json_files import read_json


#: what attnkit sweep varies, and the normaliser each value belongs to
SWEPT = {setting: names_with(setting=setting)[0] for setting in ("lam", "alpha")}

#: the keys every cell record of a sweep.json holds
SWEEP_RECORD_KEYS = ("seed", "metric", "dev", "test", "mean_support", "run_dir")
#: the fields of a cell record that hold a number (or null)
SWEEP_NUMBERS = ("dev", "test", "mean_support")


def not_a_number(rec: dict) -> str | None:
    """The first of a cell record's number fields (:data:`SWEEP_NUMBERS`) that holds something else, or None."""
    return next((k for k in SWEEP_NUMBERS if rec.get(k) is not None
                 and (isinstance(rec[k], bool) or not isinstance(rec[k], (int, float)))), None)


def read_sweep_records(path: Path) -> list[dict]:
    """The cell records of a sweep.json attnkit wrote; ValueError naming the file for one it did not write (or that
    was damaged): it is neither read as records nor replaced."""
    way_out = "move it out of the folder, or pick another --output-dir"
    try:
        recs = read_json(path, "an attnkit sweep's record", expect=None)
    except (OSError, ValueError) as e:
        raise UserError(f"{e if isinstance(e, DataFormatError) else f'{path} cannot be read ({e})'}: it is not an attnkit "
                         f"sweep's record; {way_out}") from None
    def is_record(r) -> bool:
        return (isinstance(r, dict) and all(k in r for k in SWEEP_RECORD_KEYS) and r.get("param", "lam") in SWEPT
                and isinstance(r.get(r.get("param", "lam")), (int, float, str)) and isinstance(r["seed"], int)
                and not_a_number(r) is None)
    if not isinstance(recs, list) or not all(is_record(r) for r in recs):
        raise UserError(f"{path} does not hold attnkit sweep records (a list of cells, each with its {', '.join(SWEEP_RECORD_KEYS)}): "
                         f"attnkit did not write it; {way_out}")
    return recs


def swept(r: dict) -> tuple[str, float | str]:
    """(the swept setting, its value or "softmax") of a sweep record (records of earlier attnkit sweep lam only)."""
    param = r.get("param", "lam")
    return param, r[param]
