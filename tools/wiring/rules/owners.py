"""Two owners for one object: a Secret (or Service, claim…) a controller creates from a rendered object that the set
also renders, and an External the set renders or makes a controller create.

Checked once per run, before the per-object rules: these findings come first.
"""

from __future__ import annotations

from tools.wiring.checker import Checker


def check_owners(checker: Checker) -> None:
    """Double ownership the model found while indexing, then the Externals the set itself provides."""
    for double in checker.model.double_owned:
        checker.report(
            double.holder,
            double.path,
            f"{double.kind} '{double.name}' is created by {double.source} and also rendered by this program: two "
            "owners for one object, each overwriting (or adopting) the other's content; Pulumi would show drift on "
            "every run and deleting either side removes what the other relies on",
        )
    check_externals(checker)


def check_externals(checker: Checker) -> None:
    """An External the set renders, or makes a controller create, has two owners (or a stale declaration)."""
    model = checker.model
    for key, external in model.externals.items():
        target = model.targets.get(key)
        if target is None:
            continue
        holder, path = model.owners[key]
        declared = f"declared External (created by {external.created_by})"
        if target.source == "rendered":
            message = (
                f"{key[0]} '{key[2]}' is rendered by this program but also {declared}: the declaration is "
                "stale, or two owners write one object"
            )
        else:
            message = (
                f"{key[0]} '{key[2]}' is created by {target.source} but also {declared}: two owners for one "
                "object; whichever writes it first decides its content, and references resolve to the "
                "controller's object, not the documented one"
            )
        checker.report(holder, path, message)
