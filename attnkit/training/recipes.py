"""Named recipes: a set of ``attnkit train`` options that a study found to pay, under one name (``--recipe NAME``).

A recipe only fills options the user left out; an option given with another value is refused, so that a run's
settings (``run_config.json``) are always the options that were in force. What each recipe costs and what it was
measured to give: ``studies/adapt/README.md``.
"""

from __future__ import annotations

from attnkit.errors import UserError

#: name -> (options it sets, as ``attnkit train``'s argument names -> values; one line on what it is for)
RECIPES: dict[str, tuple[dict, str]] = {
    "faithful": ({"attention": "entmax15", "sparse_layers": "last"},
                 "1.5-entmax in the last layer, softmax in the others: an attention explanation more faithful than "
                 "softmax's at no extra training time; accuracy level with softmax on SST-2, undecided (within a few "
                 "points) on the other sets measured (studies/adapt)"),
}


def recipe_options(name: str) -> str:
    """The recipe's options as they would be typed (``--attention entmax15 --sparse-layers last``)."""
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in RECIPES[name][0].items())


def apply_recipe(a) -> None:
    """Fill the recipe's options into the parsed arguments ``a`` where they were left out (None); refuse a contradiction."""
    name = getattr(a, "recipe", None)
    if name is None:
        return
    for key, value in RECIPES[name][0].items():
        given = getattr(a, key, None)
        if given is not None and str(given) != str(value):
            raise UserError(f"--recipe {name} sets {recipe_options(name)}; --{key.replace('_', '-')} {given} contradicts it: "
                            f"drop the recipe or the option")
        setattr(a, key, value)
