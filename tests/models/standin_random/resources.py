"""RandomPassword and RandomBytes as pulumi-random 4.21.4 shows them to the engine: inputs, defaults, checks, plans.

The real provider is terraform-provider-random's plugin-framework resources behind the Pulumi bridge. What the
engine sees of that, and what is copied here:

- Check returns the inputs as given (no defaults: the framework applies them at plan time) and reports validation
  as the bridge words it: ``<summary>. <detail>. Examine values at '<name>.<property>'.``, with no ``property``.
- The plan (preview's and create's outputs) is the inputs with the schema defaults: booleans true, minimums 0, and
  ``number``/``numeric`` kept equal (whichever is set decides both; neither set: true).
- Every input is RequiresReplace, so any planned change replaces; deleteBeforeReplace stays false.
- The generated values (``result`` and ``bcryptHash``; ``base64`` and ``hex``) are sensitive, so secret; the
  framework's ``id`` attribute is the constant "none". The resource ID is "none" for a password but the
  *base64 value itself* for RandomBytes: pulumi-random's ``computeRandomBytesID`` (provider/resources.go) makes it
  so, in plaintext, since a resource ID cannot be secret.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.models.standin_random import generate
from tests.models.standin_random.wire import UNKNOWN, has_unknown, plain, secret

VERSION = "4.21.4"
PASSWORD = "random:index/randomPassword:RandomPassword"
BYTES = "random:index/randomBytes:RandomBytes"
#: The framework's constant ``id`` attribute.
NONE_ID = "none"
MINIMUMS = ("minUpper", "minLower", "minNumeric", "minSpecial")
#: The Terraform names the real messages use for what Pulumi calls camelCase.
TF_NAMES = {"minUpper": "min_upper", "minLower": "min_lower", "minNumeric": "min_numeric", "minSpecial": "min_special"}


@dataclass(frozen=True)
class Kind:
    """One resource type: its inputs (with the schema's default, None for none) and the secrets it computes."""

    token: str
    defaults: Mapping[str, Any]
    computed: tuple[str, ...]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.defaults)


PASSWORD_KIND = Kind(
    PASSWORD,
    {
        "length": None,
        "special": True,
        "upper": True,
        "lower": True,
        "numeric": None,  # number/numeric: see _plan_numeric
        "number": None,
        **dict.fromkeys(MINIMUMS, 0),
        "overrideSpecial": None,
        "keepers": None,
    },
    ("result", "bcryptHash"),
)
BYTES_KIND = Kind(BYTES, {"length": None, "keepers": None}, ("base64", "hex"))
KINDS = {kind.token: kind for kind in (PASSWORD_KIND, BYTES_KIND)}
INTEGERS = ("length", *MINIMUMS)
BOOLEANS = ("special", "upper", "lower", "numeric", "number")


class UnknownTypeError(KeyError):
    """A type this stand-in does not implement (the real provider has more; the project uses these two)."""


def kind_of(token: str) -> Kind:
    if token not in KINDS:
        raise UnknownTypeError(f"standin-random implements only {', '.join(KINDS)}, not {token}")
    return KINDS[token]


# --- Check ----------------------------------------------------------------------------------------------------


def check(kind: Kind, news: Mapping[str, Any], name: str) -> list[str]:
    """The reasons ``news`` is invalid, worded as the bridge words the framework's diagnostics; none: valid."""
    values = {key: plain(value) for key, value in news.items()}
    failures = _type_failures(values)
    if failures:
        return [f"{reason}. Examine values at '{name}.{key}'." for key, reason in failures]
    if "length" not in values:
        return ["Missing required property 'length'"]
    failures = _length_failures(kind, values)
    if kind is PASSWORD_KIND:
        failures += _charset_failures(values)
    return [f"{reason}. Examine values at '{name}.{key}'." if key else reason for key, reason in failures]


def _type_failures(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Values the framework could not even decode (a fraction where an integer goes, a string for a bool)."""
    failures = []
    for key, value in values.items():
        if value is None or has_unknown(value):
            continue
        if key in INTEGERS and (isinstance(value, bool) or not isinstance(value, int | float) or value % 1):
            failures.append((key, f"Invalid Attribute Value. Attribute {key} expected an integer, got: {value!r}"))
        if key in BOOLEANS and not isinstance(value, bool):
            failures.append((key, f"Invalid Attribute Value. Attribute {key} expected a bool, got: {value!r}"))
    return failures


def _length_failures(kind: Kind, values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """int64validator.AtLeast(1), and for a password AtLeastSumOf(the minimums): unknowns and nulls wait/skip."""
    length = values["length"]
    if has_unknown(length):
        return []
    failures = []
    if length < 1:
        failures.append(
            ("length", f"Invalid Attribute Value. Attribute length value must be at least 1, got: {length:.0f}")
        )
    minimums = [key for key in MINIMUMS if values.get(key) is not None]
    if kind is PASSWORD_KIND and not any(has_unknown(values[key]) for key in minimums):
        total = sum(values[key] for key in minimums)
        if minimums and length < total:
            names = " + ".join(TF_NAMES[key] for key in minimums)
            detail = f"Attribute length value must be at least sum of {names}, got: {length:.0f}"
            failures.append(("length", f"Invalid Attribute Value. {detail}"))
    return failures


def _charset_failures(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """number/numeric's validators: configured differently; or false with special, upper and lower all false."""
    number, numeric = values.get("number"), values.get("numeric")
    failures = []
    if None not in (number, numeric) and not has_unknown([number, numeric]) and number != numeric:
        failures.append(("", "Number and numeric are both configured with different values. Number is deprecated"))
    others = [values.get(key) for key in ("special", "upper", "lower")]
    if all(value is False for value in others):
        for key in ("number", "numeric"):
            if values.get(key) is False:
                reason = f"At least one attribute out of [special,upper,lower,{key}] must be specified as true"
                failures.append((key, f"Invalid Attribute Combination. {reason}"))
    return failures


# --- Plan, diff, create -----------------------------------------------------------------------------------------


def plan(kind: Kind, news: Mapping[str, Any]) -> dict[str, Any]:
    """The planned inputs: ``news`` (secrets and unknowns kept as they came) with the schema's defaults filled."""
    planned = {key: news[key] if news.get(key) is not None else default for key, default in kind.defaults.items()}
    if kind is PASSWORD_KIND:
        planned.update(_plan_numeric(news))
    return {key: value for key, value in planned.items() if value is not None}


def _plan_numeric(news: Mapping[str, Any]) -> dict[str, Any]:
    """NumberNumericAttributePlanModifier: the one configured decides both; neither configured, both true."""
    number, numeric = news.get("number"), news.get("numeric")
    chosen = numeric if numeric is not None else number
    chosen = True if chosen is None else chosen
    return {"number": number if number is not None else chosen, "numeric": numeric if numeric is not None else chosen}


def changes(kind: Kind, olds: Mapping[str, Any], planned: Mapping[str, Any], ignore: set[str]) -> dict[str, str]:
    """Input -> "add", "delete" or "update" for each planned input that differs from the state (all replace).

    An unknown planned value counts as a change, as the framework's RequiresReplace sees it (unknown != prior).
    """
    changed = {}
    for key in kind.inputs:
        if key in ignore:
            continue
        new, old = _comparable(key, planned.get(key)), _comparable(key, olds.get(key))
        if has_unknown(planned.get(key)) or new != old:
            changed[key] = "add" if old is None else "delete" if new is None else "update"
    return changed


def _comparable(key: str, value: Any) -> Any:
    """What RequiresReplace compares: keepers without null entries (an empty map is none); "" special set is none."""
    value = plain(value)
    if key == "keepers" and isinstance(value, dict):
        value = {name: item for name, item in value.items() if item is not None} or None
    if key == "overrideSpecial" and value == "":
        return None
    return value


def create(kind: Kind, planned: Mapping[str, Any], preview: bool) -> tuple[str, dict[str, Any]]:
    """The new resource's ID and outputs; on preview the computed ones are unknown (secret) and the ID empty."""
    if preview:
        unknowns = {key: secret(UNKNOWN) for key in kind.computed}
        return "", {**planned, **unknowns, "id": UNKNOWN}
    values = {key: plain(value) for key, value in planned.items()}
    if kind is PASSWORD_KIND:
        computed = _password_outputs(values)
        resource_id = NONE_ID
    else:
        data = generate.random_bytes(int(values["length"]))
        computed = {"base64": base64.b64encode(data).decode(), "hex": data.hex()}
        resource_id = computed["base64"]  # computeRandomBytesID: the value, in plaintext
    return resource_id, {**planned, **{key: secret(value) for key, value in computed.items()}, "id": NONE_ID}


def _password_outputs(values: Mapping[str, Any]) -> dict[str, str]:
    params = generate.PasswordParams(
        length=int(values["length"]),
        upper=values["upper"],
        lower=values["lower"],
        numeric=values["numeric"],
        special=values["special"],
        min_upper=int(values["minUpper"]),
        min_lower=int(values["minLower"]),
        min_numeric=int(values["minNumeric"]),
        min_special=int(values["minSpecial"]),
        override_special=values.get("overrideSpecial") or "",
    )
    result = generate.password(params)
    return {"result": result, "bcryptHash": generate.bcrypt_hash(result)}


def update(kind: Kind, olds: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    """The framework's Update: the plan, whose computed values UseStateForUnknown keeps from the state."""
    kept = {key: olds[key] for key in (*kind.computed, "id") if key in olds}
    return {**planned, **kept}


# --- Schema -----------------------------------------------------------------------------------------------------


def _property_type(key: str) -> dict[str, Any]:
    if key in INTEGERS:
        return {"type": "integer"}
    if key in BOOLEANS:
        return {"type": "boolean"}
    if key == "keepers":
        return {"type": "object", "additionalProperties": {"type": "string"}}
    return {"type": "string"}


def _resource_schema(kind: Kind) -> dict[str, Any]:
    inputs = {key: _property_type(key) for key in kind.inputs}
    outputs = {**inputs, **{key: {"type": "string", "secret": True} for key in kind.computed}}
    return {
        "description": "standin-random: a stand-in for pulumi-random's resource of this name (tests only).",
        "inputProperties": inputs,
        "requiredInputs": ["length"],
        "properties": outputs,
        "required": sorted(key for key in outputs if key not in ("keepers", "overrideSpecial")),
    }


def schema() -> dict[str, Any]:
    """A minimal package schema: the two resources, their properties, which outputs are secret."""
    return {
        "name": "random",
        "version": VERSION,
        "description": "standin-random: a test stand-in for pulumi-random (RandomPassword and RandomBytes only).",
        "resources": {kind.token: _resource_schema(kind) for kind in KINDS.values()},
    }
