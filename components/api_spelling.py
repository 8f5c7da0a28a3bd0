"""Between the two spellings of a Kubernetes object: the SDK's (``container_port``) and the API's (``containerPort``).

The components build objects as pulumi-kubernetes' typed ``*ArgsDict``, which spell fields in Python; the SDK
translates them when it sends a resource. Where the API's spelling must survive the SDK (an output of the component
package, a custom resource's spec, a name hashed from a spec) or a reader wants what the cluster runs,
:func:`api_spelled` translates exactly as the SDK's serializer does (``pulumi.runtime.rpc.serialize_property``),
from the same tables of the same input types: an input type's property names are translated, a map's keys
(labels, annotations, ConfigMap data, resource amounts) are kept as written, lists are walked item by item, and
every other value is left as it is. :func:`python_spelled` is the reverse, for data kept in the API's terms
(the NetworkPolicies) that reaches the SDK typed. ``SdkType`` is the input type a ``*ArgsDict`` corresponds to
(``ContainerArgs`` for ``ContainerArgsDict``). ``pulumi._types`` is private, but the SDK is pinned exactly and
tests/components/test_api_spelling.py holds this module to the real serializer.
"""

from __future__ import annotations

import typing
from collections import abc
from typing import Any

from pulumi import _types

__all__ = ["api_spelled", "python_spelled"]


def api_spelled(value: Any, sdk_type: type) -> Any:
    """``value`` (Python-spelled, of the input type ``sdk_type``, or a list of them) as the API receives it."""
    return _respell(value, sdk_type, to_api=True)


def python_spelled(value: Any, sdk_type: type) -> Any:
    """``value`` (API-spelled, of the input type ``sdk_type``, or a list of them) as the SDK's ``*ArgsDict``."""
    return _respell(value, sdk_type, to_api=False)


def _respell(value: Any, typ: Any, *, to_api: bool) -> Any:
    typ = _types.unwrap_type(typ) if typ is not None else None
    if isinstance(value, abc.Sequence) and not isinstance(value, (str, bytes)):
        # A list of the input type itself (the caller's pieces), or a property's list (its item type).
        element = typ if typ is not None and _types.is_input_type(typ) else _item_type(typ)
        return [_respell(item, element, to_api=to_api) for item in value]
    if not isinstance(value, abc.Mapping) or typ is None:
        return value
    if _types.is_input_type(typ):
        to_pulumi: dict[str, str] = _types.input_type_py_to_pulumi_names(typ)
        to_python = {api: py for py, api in to_pulumi.items()}
        types = _types.input_type_types(typ)  # by the API's name
        respelled = {}
        for key, item in value.items():
            api_name = to_pulumi[key] if to_api and key in to_pulumi else key
            respelled[api_name if to_api else to_python.get(key, key)] = _respell(
                item, types.get(api_name), to_api=to_api
            )
        return respelled
    if typing.get_origin(typ) in (dict, abc.Mapping, typing.Mapping):
        args = typing.get_args(typ)
        if len(args) == 2 and args[0] is str:
            return {key: _respell(item, args[1], to_api=to_api) for key, item in value.items()}
    return value


def _item_type(typ: Any) -> Any:
    args = typing.get_args(typ) if typ is not None else ()
    return args[0] if len(args) == 1 else None
