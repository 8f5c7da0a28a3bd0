"""CloudNativePG: what a Cluster provides (Secrets, Services, instance pods), the Secrets and object stores it
reads, its external clusters, ScheduledBackups and the barman-cloud ObjectStore.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support.wiring_objects import (
    check,
    container,
    deployment,
    ingress,
    meta,
    network_policy,
    only,
    pod_spec,
    secret,
    service,
)


def cluster(name: str = "db", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": meta(name),
        "spec": {"instances": 1, **spec},
    }


def db_env(secret_name: str, key: str = "password", name: str = "web") -> dict[str, Any]:
    env = [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}]
    return deployment(pod_spec(container(env=env)), name=name)


def test_cnpg_cluster_provides_app_secret_and_services() -> None:
    objects = (cluster(bootstrap={"initdb": {"database": "app", "owner": "app"}}), db_env("db-app"))
    assert check(*objects) == []
    assert check(*objects, ingress("db-rw", {"name": "postgres"}), ingress("db-ro", {"number": 5432})) == []
    assert only(check(*objects, db_env("db-app", "token", name="api"))).path.endswith(".key")
    assert only(check(cluster(), ingress("db-rw", {"number": 80}))).path.endswith(".port")


def test_cnpg_default_bootstrap_is_initdb() -> None:
    assert check(cluster(), db_env("db-app")) == []


def test_cnpg_no_app_secret_for_replica_or_own_secret() -> None:
    replica = cluster(
        bootstrap={"recovery": {"source": "src", "database": "app", "owner": "app"}},
        replica={"enabled": True, "source": "src"},
        externalClusters=[{"name": "src"}],
    )
    assert "creates no application Secret for a replica" in only(check(replica, db_env("db-app"))).message
    own = cluster(bootstrap={"initdb": {"database": "app", "owner": "app", "secret": {"name": "mine"}}})
    assert len(check(own, secret("mine", "username", "password"), db_env("db-app"))) == 1
    promoted = copy.deepcopy(replica)
    promoted["spec"]["replica"]["enabled"] = False
    assert check(promoted, db_env("db-app")) == []


def test_cnpg_superuser_secret_only_when_enabled() -> None:
    assert "enableSuperuserAccess" in only(check(cluster(), db_env("db-superuser"))).message
    assert check(cluster(enableSuperuserAccess=True), db_env("db-superuser")) == []


def test_cnpg_disabled_default_services() -> None:
    disabled = cluster(managed={"services": {"disabledDefaultServices": ["ro", "r"]}})
    assert len(check(disabled, ingress("db-ro", {"number": 5432}))) == 1
    assert check(disabled, ingress("db-rw", {"number": 5432})) == []


def test_cnpg_pods_count_for_selectors_but_their_ports_are_not_known() -> None:
    policy = network_policy({"matchLabels": {"cnpg.io/cluster": "db"}})
    assert check(cluster(), policy) == []
    assert len(check(cluster("other"), policy)) == 1
    primary = service("db-primary", selector={"cnpg.io/cluster": "db", "role": "primary"}, ports=[{"port": 5432}])
    assert check(cluster(), primary) == []


def test_cnpg_cluster_secret_references() -> None:
    spec = {
        "bootstrap": {"initdb": {"database": "app", "owner": "app", "secret": {"name": "app-creds"}}},
        "externalClusters": [{"name": "src", "password": {"name": "src-pass", "key": "password"}}],
    }
    assert {f.path for f in check(cluster(**spec))} == {
        "spec.bootstrap.initdb.secret",
        "spec.externalClusters[0].password",
    }
    assert only(check(cluster(**spec), secret("app-creds"), secret("src-pass", "pw"))).path.endswith("password.key")
    assert check(cluster(**spec), secret("app-creds"), secret("src-pass", "password")) == []


def test_cnpg_external_cluster_must_not_read_the_clusters_own_generated_secrets() -> None:
    source = {"name": "src", "sslKey": {"name": "db-replication", "key": "tls.key"}}
    finding = only(check(cluster(externalClusters=[source])))
    assert "generates for this Cluster itself" in finding.message
    copied = {"name": "src", "sslKey": {"name": "src-replication", "key": "tls.key"}}
    assert check(cluster(externalClusters=[copied]), secret("src-replication", "tls.key")) == []


def test_cnpg_sources_must_be_external_clusters() -> None:
    broken = cluster(replica={"enabled": True, "source": "active"}, externalClusters=[{"name": "src"}])
    assert only(check(broken)).path == "spec.replica.source"
    sound = cluster(replica={"enabled": True, "source": "src"}, externalClusters=[{"name": "src"}])
    assert check(sound) == []


def object_store(name: str = "store", creds: str = "s3") -> dict[str, Any]:
    s3 = {"accessKeyId": {"name": creds, "key": "ID"}, "secretAccessKey": {"name": creds, "key": "KEY"}}
    return {
        "apiVersion": "barmancloud.cnpg.io/v1",
        "kind": "ObjectStore",
        "metadata": meta(name),
        "spec": {"configuration": {"destinationPath": "s3://b/p", "s3Credentials": s3}},
    }


def test_object_store_credentials() -> None:
    assert len(check(object_store())) == 2
    assert (
        only(check(object_store(), secret("s3", "ID"))).path == "spec.configuration.s3Credentials.secretAccessKey.key"
    )
    assert check(object_store(), secret("s3", "ID", "KEY")) == []


PLUGIN = [
    {"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": True, "parameters": {"barmanObjectName": "store"}}
]


def test_cluster_plugin_object_store() -> None:
    assert only(check(cluster(plugins=PLUGIN))).path == "spec.plugins[0].parameters.barmanObjectName"
    assert check(cluster(plugins=PLUGIN), object_store(), secret("s3", "ID", "KEY")) == []
    source = {
        "name": "src",
        "plugin": {"name": "barman-cloud.cloudnative-pg.io", "parameters": {"barmanObjectName": "x"}},
    }
    assert len(check(cluster(externalClusters=[source]))) == 1


def scheduled_backup(cluster_name: str = "db", method: str = "plugin") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedule": "0 0 0 * * *", "cluster": {"name": cluster_name}, "method": method}
    if method == "plugin":
        spec["pluginConfiguration"] = {"name": "barman-cloud.cloudnative-pg.io"}
    return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "ScheduledBackup", "metadata": meta("daily"), "spec": spec}


def test_scheduled_backup_cluster_and_method() -> None:
    store = (object_store(), secret("s3", "ID", "KEY"))
    assert only(check(cluster(plugins=PLUGIN), *store, scheduled_backup("other"))).path == "spec.cluster"
    assert "no spec.plugins entry" in only(check(cluster(), scheduled_backup())).message
    assert "barmanObjectStore" in only(check(cluster(), scheduled_backup(method="barmanObjectStore"))).message
    assert check(cluster(plugins=PLUGIN), *store, scheduled_backup()) == []
