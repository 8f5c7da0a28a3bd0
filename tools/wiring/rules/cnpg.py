"""CloudNativePG and its barman-cloud plugin: the Secrets and ObjectStores a Cluster reads (and that it reads no
Secret under a name the operator generates for it), the external clusters its bootstrap and replica name, what a
ScheduledBackup's method needs of its Cluster, and the credentials an ObjectStore reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import api_group, as_dict, as_list, nested, ref_name
from tools.wiring.model import Holder
from tools.wiring.operators import cnpg_secrets
from tools.wiring.vocabulary import BARMAN_CLOUD_GROUP, CNPG_GROUP

SecretRef = tuple[str, Any, Any]  # (path, Secret name, key or None)


def check_cnpg_cluster(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """Secrets and object stores a Cluster reads; external cluster names; no reading its own generated secrets."""
    if api_group(obj) != CNPG_GROUP:
        return
    spec = as_dict(obj.get("spec"))
    stall = "CloudNativePG would not reconcile the Cluster (secret not found): no instance would start"
    external_refs, external_names = _check_external_clusters(checker, holder, spec)
    for path, secret, key in [*_secret_refs(spec), *external_refs]:
        checker.ref(
            holder,
            path,
            "Secret",
            secret,
            consequence=stall,
            keys=[(key, f"{path}.key")] if key is not None else [],
            key_consequence=stall,
        )
    for k, plugin in enumerate(as_list(spec.get("plugins"))):
        _object_store(checker, holder, f"spec.plugins[{k}].parameters.barmanObjectName", nested(plugin, "parameters"))
    for path in ("spec.bootstrap.recovery.source", "spec.bootstrap.pg_basebackup.source", "spec.replica.source"):
        source = nested(spec, *path.split(".")[1:])
        if ref_name(source) and source not in external_names:
            checker.report(
                holder,
                path,
                f"'{source}' is not the name of an entry in spec.externalClusters "
                f"({', '.join(sorted(str(n) for n in external_names)) or 'none'}): the webhook would reject the "
                "Cluster, or the operator would not bootstrap it",
            )


def _secret_refs(spec: Mapping[str, Any]) -> list[SecretRef]:
    """The Secrets a Cluster's own spec names: superuser, bootstrap, certificates, managed roles, barman S3."""
    refs: list[SecretRef] = [("spec.superuserSecret", nested(spec, "superuserSecret", "name"), None)]
    for method in ("initdb", "recovery", "pg_basebackup"):
        refs.append((f"spec.bootstrap.{method}.secret", nested(spec, "bootstrap", method, "secret", "name"), None))
    for field_name in ("serverTLSSecret", "serverCASecret", "clientCASecret", "replicationTLSSecret"):
        refs.append((f"spec.certificates.{field_name}", nested(spec, "certificates", field_name), None))
    for k, role in enumerate(as_list(nested(spec, "managed", "roles"))):
        refs.append((f"spec.managed.roles[{k}].passwordSecret", nested(role, "passwordSecret", "name"), None))
    for field_name in ("accessKeyId", "secretAccessKey", "region", "sessionToken"):
        ref = nested(spec, "backup", "barmanObjectStore", "s3Credentials", field_name)
        path = f"spec.backup.barmanObjectStore.s3Credentials.{field_name}"
        refs.append((path, nested(ref, "name"), nested(ref, "key")))
    return refs


def _check_external_clusters(
    checker: Checker, holder: Holder, spec: Mapping[str, Any]
) -> tuple[list[SecretRef], set[Any]]:
    """The external clusters' object stores, and no Secret of theirs under a name the operator generates for this
    Cluster; returns their Secret references (resolved with the Cluster's own) and their names."""
    own = cnpg_secrets(holder.name, spec)
    refs: list[SecretRef] = []
    names = set()
    for k, external in enumerate(as_list(spec.get("externalClusters"))):
        names.add(nested(external, "name"))
        for field_name in ("sslKey", "sslCert", "sslRootCert", "password"):
            ref = nested(external, field_name)
            path = f"spec.externalClusters[{k}].{field_name}"
            secret = ref_name(nested(ref, "name"))
            refs.append((path, secret, nested(ref, "key")))
            if secret in own:
                checker.report(
                    holder,
                    path,
                    f"Secret '{secret}' has the name CloudNativePG uses for a Secret it generates for this "
                    f"Cluster itself, not for source cluster '{nested(external, 'name')}': unless the source's copy "
                    "is in place before the Cluster is created (and is complete enough to serve as this "
                    "cluster's own), the operator generates its own under this name and the connection to the "
                    "source fails authentication / certificate verification; give the copy a distinct name",
                )
        store = nested(external, "plugin", "parameters", "barmanObjectName")
        _object_store(checker, holder, f"spec.externalClusters[{k}].plugin.parameters.barmanObjectName", store)
    return refs, names


def _object_store(checker: Checker, holder: Holder, path: str, parameters_or_name: Any) -> None:
    name = parameters_or_name
    if isinstance(parameters_or_name, dict):
        name = parameters_or_name.get("barmanObjectName")
    checker.ref(
        holder,
        path,
        "ObjectStore",
        name,
        consequence="the barman-cloud plugin would fail WAL archiving / restore (ObjectStore not found)",
    )


def check_scheduled_backup(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """The cluster exists and has what the backup method needs."""
    if api_group(obj) != CNPG_GROUP:
        return
    spec = as_dict(obj.get("spec"))
    name = nested(spec, "cluster", "name")
    target = checker.ref(
        holder, "spec.cluster", "Cluster", name, consequence="every scheduled backup would fail: no base backups"
    )
    if target is None or target.obj is None:
        return
    cluster_spec = as_dict(target.obj.get("spec"))
    method = spec.get("method") or "barmanObjectStore"
    missing = None
    if method == "plugin":
        plugin = nested(spec, "pluginConfiguration", "name")
        if plugin not in {nested(p, "name") for p in as_list(cluster_spec.get("plugins"))}:
            missing = f"no spec.plugins entry named '{plugin}'"
    elif method == "barmanObjectStore" and not nested(cluster_spec, "backup", "barmanObjectStore"):
        missing = "no spec.backup.barmanObjectStore"
    elif method == "volumeSnapshot" and not nested(cluster_spec, "backup", "volumeSnapshot"):
        missing = "no spec.backup.volumeSnapshot"
    if missing:
        checker.report(
            holder,
            "spec.method",
            f"method '{method}' but Cluster '{name}' has {missing}: every scheduled backup would fail",
        )


def check_object_store(checker: Checker, obj: Mapping[str, Any], holder: Holder) -> None:
    """The barman-cloud plugin's ObjectStore: the credential Secrets (and keys) its configuration names."""
    if api_group(obj) != BARMAN_CLOUD_GROUP:
        return
    configuration = as_dict(nested(obj, "spec", "configuration"))
    fail = "the barman-cloud plugin could not reach the store: WAL archiving and backups would fail"
    selectors = [
        ("s3Credentials", ("accessKeyId", "secretAccessKey", "region", "sessionToken")),
        ("azureCredentials", ("connectionString", "storageAccount", "storageKey", "storageSasToken")),
        ("googleCredentials", ("applicationCredentials",)),
    ]
    refs = [
        (f"spec.configuration.{group}.{field_name}", nested(configuration, group, field_name))
        for group, fields in selectors
        for field_name in fields
    ]
    refs.append(("spec.configuration.endpointCA", configuration.get("endpointCA")))
    for path, ref in refs:
        if isinstance(ref, dict):
            checker.ref(
                holder,
                path,
                "Secret",
                ref.get("name"),
                consequence=fail,
                keys=[(ref.get("key"), f"{path}.key")],
                key_consequence=fail,
            )


RULES = {"Cluster": check_cnpg_cluster, "ScheduledBackup": check_scheduled_backup, "ObjectStore": check_object_store}
