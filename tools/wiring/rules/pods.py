"""Pod references: what the kubelet and admission resolve before a pod of a rendered workload can run.

Volumes (Secret, ConfigMap, projected sources, claims) and their items' keys; env and envFrom; mounts that name a
volume, and a subPath into a read-only volume that names a file it holds; probe and lifecycle ports given by
name; image pull secrets; the service account. Run on every rendered pod template (model.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.checker import Checker
from tools.wiring.manifest import as_dict, as_list, is_true, nested, ref_name
from tools.wiring.model import Holder, PodTemplate, containers

Volumes = dict[str, tuple[str, Mapping[str, Any]]]  # volume name -> (its path, the volume)
FileSource = tuple[str, Mapping[str, Any], Any]  # (kind, or "" for files listed inline; the source; its name)


def check_pod(checker: Checker, tpl: PodTemplate) -> None:
    """Volumes, env, mounts, probes, pull secrets and the service account of one pod template."""
    spec, path, holder = as_dict(tpl.spec), tpl.path, tpl.holder
    volumes: Volumes = {}
    for i, volume in enumerate(as_list(spec.get("volumes"))):
        if isinstance(volume, dict) and ref_name(volume.get("name")):
            volumes[volume["name"]] = (f"{path}.volumes[{i}]", volume)
            check_volume(checker, holder, f"{path}.volumes[{i}]", volume)
    used: set[str] = set()
    for container_path, container in containers(spec, path):
        check_env(checker, holder, container_path, container)
        check_probes(checker, holder, container_path, container)
        used |= check_mounts(checker, tpl, container_path, container, volumes)
    for volume_name, (volume_path, _volume) in volumes.items():
        if volume_name not in used:
            checker.report(
                holder,
                volume_path,
                f"volume '{volume_name}' is mounted by no container: dead wiring, yet the kubelet must still "
                "set it up (and find what it references) before the pod can start",
            )
    for k, pull in enumerate(as_list(spec.get("imagePullSecrets"))):
        checker.ref(
            holder,
            f"{path}.imagePullSecrets[{k}]",
            "Secret",
            nested(pull, "name"),
            consequence="the kubelet would pull without it (FailedToRetrieveImagePullSecret); "
            "a private image would end in ImagePullBackOff",
        )
    account = ref_name(spec.get("serviceAccountName")) or ref_name(spec.get("serviceAccount")) or "default"
    checker.ref(
        holder,
        f"{path}.serviceAccountName",
        "ServiceAccount",
        account,
        consequence="ServiceAccount admission would reject every pod (error looking up service account): "
        f"the {tpl.kind} would create none",
    )


def check_mounts(
    checker: Checker, tpl: PodTemplate, container_path: str, container: Mapping[str, Any], volumes: Volumes
) -> set[str]:
    """Each mount names a volume of the pod (or a claim template), and its subPath a file the volume holds; returns
    the volume names the container mounts."""
    used: set[str] = set()
    for field_name in ("volumeMounts", "volumeDevices"):
        for k, mount in enumerate(as_list(container.get(field_name))):
            mount_name = ref_name(nested(mount, "name"))
            if mount_name is None:
                continue
            used.add(mount_name)
            mount_path = f"{container_path}.{field_name}[{k}]"
            if mount_name not in volumes and mount_name not in tpl.claim_templates:
                checker.report(
                    tpl.holder,
                    f"{mount_path}.name",
                    f"mounts volume '{mount_name}', which the pod does not define: the API server would "
                    f"reject the {tpl.kind} ({field_name}[{k}].name: Not found)",
                )
            elif mount_name in volumes and ref_name(nested(mount, "subPath")):
                check_sub_path(checker, tpl.holder, mount_path, mount, volumes[mount_name], tpl.namespace)
    return used


def check_volume(checker: Checker, holder: Holder, path: str, volume: Mapping[str, Any]) -> None:
    """The Secret, ConfigMap (plain or projected) or claim a volume names, with its items' keys."""
    secret, config_map, claim = volume.get("secret"), volume.get("configMap"), volume.get("persistentVolumeClaim")
    if isinstance(secret, dict):
        _volume_source(checker, holder, f"{path}.secret", "Secret", secret, secret.get("secretName"))
    if isinstance(config_map, dict):
        _volume_source(checker, holder, f"{path}.configMap", "ConfigMap", config_map, config_map.get("name"))
    for j, source in enumerate(as_list(nested(volume, "projected", "sources"))):
        for field_name, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
            ref = nested(source, field_name)
            if isinstance(ref, dict):
                source_path = f"{path}.projected.sources[{j}].{field_name}"
                _volume_source(checker, holder, source_path, kind, ref, ref.get("name"))
    if isinstance(claim, dict):
        checker.ref(
            holder,
            f"{path}.persistentVolumeClaim",
            "PersistentVolumeClaim",
            claim.get("claimName"),
            consequence="the pod would stay Pending (FailedMount / unbound claim)",
        )


def _volume_source(
    checker: Checker, holder: Holder, path: str, kind: str, source: Mapping[str, Any], name: Any
) -> None:
    noun = kind.lower()
    items = [(nested(item, "key"), f"{path}.items[{k}].key") for k, item in enumerate(as_list(source.get("items")))]
    checker.ref(
        holder,
        path,
        kind,
        name,
        optional=is_true(source.get("optional")),
        consequence=f'the pod would stay in ContainerCreating (FailedMount: {noun} "{name}" not found)',
        keys=items,
        key_consequence="the pod would stay in ContainerCreating (FailedMount: the item's key is missing)",
    )


def check_env(checker: Checker, holder: Holder, path: str, container: Mapping[str, Any]) -> None:
    """env's secretKeyRef / configMapKeyRef (with their keys) and envFrom's sources."""
    fail = "the container would not start (CreateContainerConfigError)"
    for k, env in enumerate(as_list(container.get("env"))):
        for field_name, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            ref = nested(env, "valueFrom", field_name)
            if isinstance(ref, dict):
                ref_path = f"{path}.env[{k}].valueFrom.{field_name}"
                checker.ref(
                    holder,
                    ref_path,
                    kind,
                    ref.get("name"),
                    optional=is_true(ref.get("optional")),
                    consequence=fail,
                    keys=[(ref.get("key"), f"{ref_path}.key")],
                    key_consequence=f"{fail}, or, if optional, ${nested(env, 'name')} would silently be unset",
                )
    for k, env_from in enumerate(as_list(container.get("envFrom"))):
        for field_name, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            ref = nested(env_from, field_name)
            if isinstance(ref, dict):
                checker.ref(
                    holder,
                    f"{path}.envFrom[{k}].{field_name}",
                    kind,
                    ref.get("name"),
                    optional=is_true(ref.get("optional")),
                    consequence=fail,
                )


def _file_sources(volume: Mapping[str, Any]) -> list[FileSource] | None:
    """Where a read-only volume's files come from; None for a volume of another type."""
    if isinstance(volume.get("secret"), dict):
        return [("Secret", volume["secret"], volume["secret"].get("secretName"))]
    if isinstance(volume.get("configMap"), dict):
        return [("ConfigMap", volume["configMap"], volume["configMap"].get("name"))]
    if isinstance(volume.get("downwardAPI"), dict):
        return [("", volume["downwardAPI"], None)]
    if isinstance(volume.get("projected"), dict):
        return _projected_file_sources(volume["projected"])
    return None


def _projected_file_sources(projected: Mapping[str, Any]) -> list[FileSource]:
    sources: list[FileSource] = []
    for source in as_list(projected.get("sources")):
        for field_name, kind in (("secret", "Secret"), ("configMap", "ConfigMap"), ("downwardAPI", "")):
            ref = nested(source, field_name)
            if isinstance(ref, dict):
                sources.append((kind, ref, ref.get("name")))
        for field_name in ("serviceAccountToken", "clusterTrustBundle"):
            token_path = nested(source, field_name, "path")
            if isinstance(token_path, str):
                sources.append(("", {"items": [{"path": token_path}]}, None))
    return sources


def volume_files(checker: Checker, namespace: str | None, volume: Mapping[str, Any]) -> set[str] | None:
    """The file paths a read-only projected volume will hold; None when not known offline."""
    sources = _file_sources(volume)
    if sources is None:
        return None
    files: set[str] = set()
    for kind, ref, name in sources:
        items = as_list(ref.get("items"))
        if items or not kind:
            files.update(p for item in items if isinstance(p := nested(item, "path"), str))
            continue
        target = checker.model.resolve(kind, namespace, name) if ref_name(name) else None
        if target is None or target.keys is None:
            return None
        files.update(target.keys)
    return files


def check_sub_path(
    checker: Checker,
    holder: Holder,
    mount_path: str,
    mount: Mapping[str, Any],
    volume: tuple[str, Mapping[str, Any]],
    namespace: str | None,
) -> None:
    """A subPath into a configMap/secret/projected volume must name a file (or directory) the volume holds."""
    sub_path = str(mount["subPath"]).strip("/")
    files = volume_files(checker, namespace, volume[1])
    if files is None:
        return
    if sub_path in files or any(f.startswith(sub_path + "/") for f in files):
        return
    listed = ", ".join(sorted(files)) or "nothing"
    checker.report(
        holder,
        f"{mount_path}.subPath",
        f"subPath '{sub_path}' is not in volume '{mount['name']}' (it holds: {listed}): the kubelet cannot "
        "create it in a read-only volume, so the container would not start (CreateContainerConfigError)",
    )


def check_probes(checker: Checker, holder: Holder, path: str, container: Mapping[str, Any]) -> None:
    """Probe and lifecycle-hook ports given by name must be port names of the same container."""
    names = {p.get("name") for p in as_list(container.get("ports")) if isinstance(p, dict)}
    handlers = [(f"{probe}", nested(container, probe)) for probe in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [(f"lifecycle.{hook}", nested(container, "lifecycle", hook)) for hook in ("postStart", "preStop")]
    for handler_path, handler in handlers:
        for action in ("httpGet", "tcpSocket", "grpc"):
            port = nested(handler, action, "port")
            if isinstance(port, str) and port not in names:
                declared = ", ".join(sorted(str(n) for n in names if n)) or "none"
                checker.report(
                    holder,
                    f"{path}.{handler_path}.{action}.port",
                    f"port '{port}' is not a port name of container '{container.get('name')}' (it names: "
                    f"{declared}): the kubelet cannot resolve it, so the {handler_path} fails every time",
                )
