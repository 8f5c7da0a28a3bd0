"""How a config problem is written: ``headscale-ha:<key>: <what is wrong>, got <value>``, secrets never shown.

One format for every rule (the sections' own validators, the rules across keys, the stage rules, the files'
hints), so a user reads the key, the value and what is expected the same way everywhere.
"""

from __future__ import annotations

import difflib
import json
import re

from headscale_ha.components.settings import PROJECT

#: The value of a key that is not set ("got nothing").
GONE = object()

#: Keys whose values are secrets: they must be set with `pulumi config set --secret`, and no problem shows them.
SECRET_KEYS = (
    "kubeconfig",
    "noisePrivateKey",
    "derpPrivateKey",
    "oidcClientSecret",
    "routerAuthKeys",
    "headplaneApiKey",
    "bootstrapApiKey",
    "objectStoreAccessKeyId",
    "objectStoreSecretAccessKey",
    "witnessKubeconfig",
    "peerKubeconfigs",
)


def shown(value: object, *, brief: bool = False) -> str:
    """The value as a message shows it: in full, unless ``brief`` (a value nothing reads: an unknown key's)."""
    if value is GONE:
        return "nothing"
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, dict | list) else repr(value)
    return text if not brief or len(text) <= 120 else text[:117] + "..."


def problem(key: str, what: str, value: object, *, secret: bool = False, brief: bool = False) -> str:
    """``headscale-ha:<key>: <what>, got <value>``; the value of a secret key (or one marked ``secret``) is hidden."""
    secret = secret or key.split(".")[0].split("[")[0] in SECRET_KEYS
    return f"{PROJECT}:{key}: {what}, got {'[secret]' if secret and value is not GONE else shown(value, brief=brief)}"


#: A name that may hold a secret although it is no key of SECRET_KEYS (a misspelt or misplaced one).
_SECRET_WORDS = re.compile(r"secret|password|passwd|token|private|apikey|authkey|accesskey", re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """True for a key name that may hold a secret: one of SECRET_KEYS misspelt, or a secret-sounding word."""
    return bool(_SECRET_WORDS.search(name) or difflib.get_close_matches(name, SECRET_KEYS, n=1, cutoff=0.8))
