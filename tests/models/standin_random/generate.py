"""The values the stand-in generates, the way terraform-provider-random (which pulumi-random 4.21.4 bridges) does.

``password`` follows ``internal/random/string.go``: the minimum counts first, drawn from their own character sets
(whether or not that class is enabled), the rest from the union of the enabled sets, then the whole shuffled; every
draw from ``secrets`` (the real one uses Go's crypto/rand). ``bcrypt_hash`` is the real algorithm when this
interpreter can compute it (see ``BCRYPT``); ``random_bytes`` is the OS's CSPRNG, as crypto/rand is.
"""

from __future__ import annotations

import importlib
import secrets
import warnings
from collections.abc import Callable
from dataclasses import dataclass

NUMERIC = "0123456789"
LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIAL = "!@#$%&*()-_=+[]{}<>:?"
#: Go's bcrypt.DefaultCost, and the prefix golang.org/x/crypto/bcrypt writes.
BCRYPT_COST = 10
BCRYPT_PREFIX = "$2a$"
#: bcrypt reads at most 72 bytes; the real provider cuts the password there before hashing (generateHash).
BCRYPT_MAX_BYTES = 72


class EmptyCharacterSetError(ValueError):
    """Every character class is off: the real provider's "the character set specified is empty"."""


@dataclass(frozen=True)
class PasswordParams:
    """random.StringParams: the planned inputs a password is drawn from."""

    length: int
    upper: bool = True
    lower: bool = True
    numeric: bool = True
    special: bool = True
    min_upper: int = 0
    min_lower: int = 0
    min_numeric: int = 0
    min_special: int = 0
    override_special: str = ""


def password(params: PasswordParams) -> str:
    """A random string as random.CreateString makes it (length counted in characters, as its runes are)."""
    specials = params.override_special or SPECIAL
    enabled = [(params.upper, UPPER), (params.lower, LOWER), (params.numeric, NUMERIC), (params.special, specials)]
    chars = "".join(charset for on, charset in enabled if on)
    if not chars:
        raise EmptyCharacterSetError("the character set specified is empty")
    minimums = [(NUMERIC, params.min_numeric), (LOWER, params.min_lower), (UPPER, params.min_upper)]
    drawn = [
        secrets.choice(charset) for charset, count in [*minimums, (specials, params.min_special)] for _ in range(count)
    ]
    drawn += [secrets.choice(chars) for _ in range(params.length - len(drawn))]
    order = [secrets.randbits(8) for _ in drawn]  # the real sort by random bytes: ties keep no particular order
    return "".join(char for _, char in sorted(zip(order, drawn, strict=True), key=lambda pair: pair[0]))


def random_bytes(length: int) -> bytes:
    return secrets.token_bytes(length)


#: bcrypt's base64 alphabet; the salt's last character carries 2 bits, so only these four are canonical.
BCRYPT_ALPHABET = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
BCRYPT_LAST = BCRYPT_ALPHABET[::16]
#: A bcrypt setting ("$2a$10$" and 22 salt characters) is the first 29 characters of a hash.
SETTING_LENGTH = 29
Bcrypt = Callable[[bytes, str], str]


def _with_bcrypt_module() -> Bcrypt | None:
    """The ``bcrypt`` package, when installed (it is not a project requirement)."""
    try:
        bcrypt = importlib.import_module("bcrypt")  # by name: an optional module, not one every checkout resolves
    except ImportError:
        return None
    return lambda data, setting: bcrypt.hashpw(data, setting.encode()).decode()


def _with_libc_crypt() -> Bcrypt | None:
    """crypt(3) through the standard library's ``crypt`` (3.11; removed in 3.13): Debian's libxcrypt does bcrypt."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    return lambda data, setting: crypt.crypt(data.decode(), setting)


def _setting() -> str:
    salt = "".join(secrets.choice(BCRYPT_ALPHABET) for _ in range(21)) + secrets.choice(BCRYPT_LAST)
    return f"{BCRYPT_PREFIX}{BCRYPT_COST:02d}${salt}"


def _works(candidate: Bcrypt) -> bool:
    """Whether ``candidate`` computes bcrypt (a crypt(3) without it returns None or "*0", or raises)."""
    try:
        probe = candidate(b"probe", _setting())
    except (OSError, ValueError):
        return False
    return isinstance(probe, str) and len(probe) == 60 and probe.startswith(f"{BCRYPT_PREFIX}{BCRYPT_COST:02d}$")


def _pick_bcrypt() -> tuple[str, Bcrypt | None]:
    for source, find in (("the bcrypt package", _with_bcrypt_module), ("crypt(3) (libxcrypt)", _with_libc_crypt)):
        found = find()
        if found is not None and _works(found):
            return source, found
    return "none: placeholder hashes", None


#: Which bcrypt this interpreter has, and the function (None: no bcrypt here, ``bcrypt_hash`` writes a placeholder).
BCRYPT, _BCRYPT = _pick_bcrypt()
HAS_BCRYPT = _BCRYPT is not None
#: What ``bcrypt_hash`` returns when no bcrypt is available: says so, and holds nothing of the password.
PLACEHOLDER = "standin-random: no bcrypt in this interpreter (install the bcrypt package); not a hash"


def bcrypt_hash(result: str) -> str:
    """The bcrypt hash of ``result`` ($2a$, cost 10, first 72 bytes, as Go's bcrypt.GenerateFromPassword)."""
    if _BCRYPT is None:
        return PLACEHOLDER
    return _BCRYPT(result.encode()[:BCRYPT_MAX_BYTES], _setting())


def bcrypt_matches(result: str, hashed: str) -> bool:
    """Whether ``hashed`` is a bcrypt hash of ``result`` (bcrypt.CompareHashAndPassword); needs HAS_BCRYPT."""
    if _BCRYPT is None:
        raise RuntimeError(f"no bcrypt to compare with: {BCRYPT}")
    return _BCRYPT(result.encode()[:BCRYPT_MAX_BYTES], hashed[:SETTING_LENGTH]) == hashed
