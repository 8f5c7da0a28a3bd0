"""What the operators create from a rendered object, so references to it resolve: CloudNativePG's Secrets and
Services for a Cluster, cert-manager's Secret (and its keys) for a Certificate.

Pure functions of the rendered spec, each stating the operator's own rule; the model (model.py) turns them into
targets, and the missing-reference message (checker.py) uses them to say why an expected Secret is not made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.manifest import as_dict, as_list, is_true, nested, ref_name
from tools.wiring.vocabulary import CNPG_USER_SECRET_KEYS, TLS_KEYS


def cnpg_is_replica(name: str, spec: Mapping[str, Any]) -> bool:
    replica = as_dict(spec.get("replica"))
    enabled = replica.get("enabled")
    if isinstance(enabled, bool):
        return enabled
    primary = replica.get("primary")
    return bool(primary) and primary != (replica.get("self") or name)


def cnpg_creates_app_secret(name: str, spec: Mapping[str, Any]) -> bool:
    """CloudNativePG's ShouldCreateApplicationSecret: initdb (the default bootstrap) without its own secret, or
    recovery / pg_basebackup with database and owner and no secret, on a cluster that is not a replica."""
    bootstrap = as_dict(spec.get("bootstrap"))
    methods = [m for m in ("initdb", "recovery", "pg_basebackup") if isinstance(bootstrap.get(m), dict)]
    if not methods or methods[0] == "initdb":
        return not ref_name(nested(bootstrap, "initdb", "secret", "name"))
    method = as_dict(bootstrap.get(methods[0]))
    return (
        not cnpg_is_replica(name, spec)
        and bool(method.get("database"))
        and bool(method.get("owner"))
        and not ref_name(nested(method, "secret", "name"))
    )


def cnpg_secrets(name: str, spec: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """The Secrets CloudNativePG generates for a Cluster, with their keys."""
    secrets: dict[str, frozenset[str]] = {}
    if cnpg_creates_app_secret(name, spec):
        secrets[f"{name}-app"] = CNPG_USER_SECRET_KEYS
    if is_true(spec.get("enableSuperuserAccess")) and not ref_name(nested(spec, "superuserSecret", "name")):
        secrets[f"{name}-superuser"] = CNPG_USER_SECRET_KEYS
    certificates = as_dict(spec.get("certificates"))
    if not (certificates.get("serverCASecret") and certificates.get("clientCASecret")):
        secrets[f"{name}-ca"] = frozenset({"ca.crt", "ca.key"})
    if not certificates.get("serverTLSSecret"):
        secrets[f"{name}-server"] = frozenset(TLS_KEYS)
    if not certificates.get("replicationTLSSecret"):
        secrets[f"{name}-replication"] = frozenset(TLS_KEYS)
    return secrets


def cnpg_services(name: str, spec: Mapping[str, Any]) -> list[str]:
    """The Services CloudNativePG creates for a Cluster: `-rw` always, `-ro` and `-r` unless disabled, and the
    additional ones its spec names."""
    defaults_off = as_list(nested(spec, "managed", "services", "disabledDefaultServices"))
    disabled = {d for d in defaults_off if isinstance(d, str)}
    services = [f"{name}-{suffix}" for suffix in ("rw", "ro", "r") if suffix == "rw" or suffix not in disabled]
    for extra in as_list(nested(spec, "managed", "services", "additional")):
        extra_name = ref_name(nested(extra, "serviceTemplate", "metadata", "name"))
        if extra_name:
            services.append(extra_name)
    return services


def certificate_keys(spec: Mapping[str, Any]) -> frozenset[str]:
    """The keys of the Secret cert-manager writes for a Certificate (its extra output formats and keystores)."""
    keys = {"tls.crt", "tls.key", "ca.crt"}
    for output in as_list(spec.get("additionalOutputFormats")):
        keys.add({"DER": "key.der", "CombinedPEM": "tls-combined.pem"}.get(str(nested(output, "type")), ""))
    keystores = as_dict(spec.get("keystores"))
    if is_true(nested(keystores, "jks", "create")):
        keys.update({"keystore.jks", "truststore.jks"})
    if is_true(nested(keystores, "pkcs12", "create")):
        keys.update({"keystore.p12", "truststore.p12"})
    return frozenset(keys - {""})
