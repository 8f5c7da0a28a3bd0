"""What pulumi-kubernetes and the API server do with a changed field: the one rule table of the project.

``make diff`` (tools/diff/) predicts replacements and refused updates from it, and the engine model in the tests
(tests/models/engine) replaces, updates or fails with it, so the two can never disagree. Facts, from the sources of
the pinned pulumi-kubernetes 4.34 and of Kubernetes:

- REPLACE rows are pulumi-kubernetes' forceNew table (provider/pkg/provider/diff.go, ``forceNewProperties``): a
  change of such a field makes the provider's Diff answer "replace". ConfigMap and Secret data are in it unless the
  provider's ``enableConfigMapMutable`` / ``enableSecretMutable`` is on (and the object is not ``immutable``).
- REFUSE rows are the API server's update validation (pkg/apis/*/validation): pulumi-kubernetes shows an update,
  and the server refuses the patch ("field is immutable"), so ``pulumi up`` fails.
- metadata.name and metadata.namespace replace every kind (``changes_identity``). Custom resources (CloudNativePG's
  Cluster, Gateway API, cert-manager) have no forceNew fields of their own.
- A replaced object that keeps its own name is deleted before its replacement is created (``deletes_before_replace``).
- The other providers: pulumi-random replaces on any input change, this project's dynamic providers on the inputs
  of ``DYNAMIC_REPLACES`` (``replacing_inputs``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from tools.fields import ABSENT, FieldChange, covers, pattern, reaches, value_at

REPLACE = "replace"
REFUSE = "refuse"


@dataclass(frozen=True)
class ImmutableField:
    """A field whose change pulumi-kubernetes turns into a replacement (REPLACE: its forceNew table) or that the API
    server refuses to update (REFUSE: `pulumi preview` shows an update, `pulumi up` fails)."""

    kinds: tuple[str, ...]
    group: str  # API group ("" for core)
    path: str
    effect: str
    why: str
    unless: tuple[str, ...] = ()  # sub-paths that stay mutable
    condition: str = ""  # see condition_holds
    api_versions: tuple[str, ...] = ()  # only these apiVersions (default: any)
    #: The API server refuses the update too (False: only pulumi-kubernetes replaces; an adopted object takes it).
    api_refuses: bool = True


_PV_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume", "flocker",
    "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs", "photonPersistentDisk", "portworxVolume",
    "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
)  # fmt: skip
_POD_SPEC = (
    "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
    "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace",
    "subdomain", "terminationGracePeriodSeconds", "volumes",
)  # fmt: skip
_POD_CONTAINER = (
    "args", "command", "env", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "ports", "readinessProbe",
    "resources", "securityContext", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy",
    "tty", "volumeDevices", "volumeMounts", "workingDir",
)  # fmt: skip
_STS_MUTABLE = (
    "replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy", "minReadySeconds",
)  # fmt: skip

#: Facts: pulumi-kubernetes 4.x's forceNew table (provider/pkg/provider/diff.go) for REPLACE, the API server's
#: update validation (pkg/apis/*/validation) for REFUSE. metadata.name and metadata.namespace replace every kind
#: (``changes_identity``). Only API groups of Kubernetes itself: custom resources (CloudNativePG's Cluster,
#: Gateway API, cert-manager) replace only on a name or namespace change.
IMMUTABLE_FIELDS: tuple[ImmutableField, ...] = (
    ImmutableField(("Deployment", "DaemonSet"), "apps", "spec.selector", REPLACE, "the selector is immutable"),
    ImmutableField(("ReplicaSet",), "apps", "spec.selector", REFUSE, "the selector is immutable"),
    *(
        ImmutableField(("StatefulSet",), "apps", f"spec.{f}", REPLACE, f"spec.{f} is immutable")
        for f in ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy")
    ),
    ImmutableField(
        ("StatefulSet",),
        "apps",
        "spec.revisionHistoryLimit",
        REPLACE,
        "pulumi-kubernetes replaces on it (the API would allow the update)",
        api_refuses=False,
    ),
    ImmutableField(
        ("StatefulSet",),
        "apps",
        "spec",
        REFUSE,
        "a StatefulSet's spec is immutable except " + ", ".join(_STS_MUTABLE),
        unless=tuple(f"spec.{f}" for f in _STS_MUTABLE),
    ),
    *(
        ImmutableField(("Job",), "batch", f"spec.{f}", REPLACE, f"spec.{f} of a Job is immutable")
        for f in ("template", "selector", "completions")
    ),
    ImmutableField(
        ("Job",),
        "batch",
        "spec.parallelism",
        REPLACE,
        "pulumi-kubernetes replaces on it (the API would allow it)",
        api_refuses=False,
    ),
    *(
        ImmutableField(("Job",), "batch", f"spec.{f}", REFUSE, f"spec.{f} of a Job is immutable")
        for f in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy")
    ),
    *(
        ImmutableField(("PersistentVolumeClaim",), "", f"spec.{f}", REPLACE, f"spec.{f} of a claim is immutable")
        for f in ("accessModes", "selector", "storageClassName", "volumeName")
    ),
    ImmutableField(
        ("PersistentVolumeClaim",),
        "",
        "spec",
        REFUSE,
        "a claim's spec is immutable except resources.requests (expansion) and volumeAttributesClassName",
        unless=("spec.resources.requests", "spec.volumeAttributesClassName"),
    ),
    *(
        ImmutableField(("PersistentVolume",), "", f"spec.{s}", REPLACE, "a volume's source is immutable")
        for s in _PV_SOURCES
    ),
    ImmutableField(("PersistentVolume",), "", "spec.volumeMode", REFUSE, "spec.volumeMode is immutable"),
    ImmutableField(
        ("PersistentVolume",),
        "",
        "spec.nodeAffinity",
        REFUSE,
        "spec.nodeAffinity is immutable once set",
        condition="set",
    ),
    ImmutableField(("Service",), "", "spec.clusterIP", REPLACE, "spec.clusterIP is immutable"),
    *(
        ImmutableField(
            ("Service",),
            "",
            f"spec.{f}[0]",
            REFUSE,
            f"the first of spec.{f} is immutable (except when the type changes to or from ExternalName)",
            condition="not-external-name-switch",
        )
        for f in ("clusterIPs", "ipFamilies")
    ),
    ImmutableField(("Secret",), "", "type", REPLACE, "a Secret's type is immutable"),
    *(
        ImmutableField(
            ("Secret",),
            "",
            f,
            REPLACE,
            "pulumi-kubernetes replaces a Secret whose data changes (enableSecretMutable is not set, or the Secret is "
            "immutable)",
            condition="secret-data-replaces",
            api_refuses=False,
        )
        for f in ("data", "stringData")
    ),
    *(
        ImmutableField(
            ("ConfigMap",),
            "",
            f,
            REPLACE,
            "pulumi-kubernetes replaces a ConfigMap whose data changes (enableConfigMapMutable is not set, or the "
            "ConfigMap is immutable)",
            condition="configmap-data-replaces",
            api_refuses=False,
        )
        for f in ("data", "binaryData")
    ),
    # An `immutable: true` ConfigMap or Secret (pkg/apis/core/validation/validation.go, ValidateConfigMapUpdate and
    # ValidateSecretUpdate): `immutable` cannot go back, and its data cannot change (a Secret's stringData is
    # written into its data).
    ImmutableField(
        ("Secret", "ConfigMap"), "", "immutable", REFUSE, "`immutable: true` cannot be unset", condition="was-immutable"
    ),
    *(
        ImmutableField(
            (kind,),
            "",
            f,
            REFUSE,
            f"the {f} of an `immutable: true` {kind} cannot change",
            condition="stored-immutable",
        )
        for kind, fields in (("ConfigMap", ("data", "binaryData")), ("Secret", ("data", "stringData")))
        for f in fields
    ),
    ImmutableField(
        ("RoleBinding", "ClusterRoleBinding"), "rbac.authorization.k8s.io", "roleRef", REPLACE, "roleRef is immutable"
    ),
    *(
        ImmutableField(("StorageClass",), "storage.k8s.io", f, REPLACE, f"a StorageClass's {f} is immutable")
        for f in ("parameters", "provisioner")
    ),
    *(
        ImmutableField(("StorageClass",), "storage.k8s.io", f, REFUSE, f"a StorageClass's {f} is immutable")
        for f in ("reclaimPolicy", "volumeBindingMode")
    ),
    ImmutableField(
        ("PodDisruptionBudget",),
        "policy",
        "spec",
        REPLACE,
        "a policy/v1beta1 PodDisruptionBudget's spec",
        api_versions=("policy/v1beta1",),
    ),
    ImmutableField(("ResourceQuota",), "", "spec.scopes", REPLACE, "spec.scopes is immutable"),
    *(ImmutableField(("Pod",), "", f"spec.{f}", REPLACE, f"a Pod's spec.{f}") for f in _POD_SPEC),
    *(
        ImmutableField(("Pod",), "", f"spec.{c}[*].{f}", REPLACE, f"a Pod's {c}[].{f}")
        for c in ("containers", "initContainers")
        for f in _POD_CONTAINER
    ),
)

#: Inputs whose change makes this project's dynamic providers replace the resource: facts of their ``diff()``
#: (provider/resources.py: UserProvider, PreAuthKeyProvider, ApiKeyProvider, NodeSettingsProvider;
#: PolicyProvider replaces on nothing). tests/tools/test_kubernetes_rules.py calls each real ``diff()`` against it.
DYNAMIC_REPLACES: dict[str, tuple[str, ...]] = {
    "pulumi-python:dynamic/headscale:User": ("displayName", "email"),
    "pulumi-python:dynamic/headscale:PreAuthKey": ("user", "reusable", "ephemeral", "aclTags", "lifetime"),
    "pulumi-python:dynamic/headscale:ApiKey": ("lifetime",),
    "pulumi-python:dynamic/headscale:NodeSettings": ("nodeName", "user"),
}


def is_random(type_: str) -> bool:
    """A pulumi-random resource (type tokens ``random:index/...``)."""
    return type_.startswith("random:")


def replacing_inputs(type_: str, changes: Sequence[FieldChange]) -> list[FieldChange]:
    """The input changes that make a pulumi-random or dynamic provider replace its resource (a Kubernetes object's:
    ``replacing_rule``).

    Facts: pulumi-random bridges hashicorp/terraform-provider-random, whose resources mark every input attribute
    RequiresReplace (internal/provider/resource_password.go, passwordSchemaV3; resource_bytes.go, bytesSchemaV0), so
    any input change replaces; this project's dynamic providers replace on the inputs of ``DYNAMIC_REPLACES``.
    """
    if is_random(type_):
        return list(changes)
    replacing = DYNAMIC_REPLACES.get(type_, ())
    return [c for c in changes if c.path and c.path[0] in replacing]


def api_group(api_version: Any) -> str:
    text = str(api_version or "")
    return text.rsplit("/", 1)[0] if "/" in text else ""


def truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([numkMGTPE]|[KMGTPE]i)?$")
_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
    "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}  # fmt: skip


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``10Gi``, ``500M``) in base units, or None when it is not one."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class ProviderFlags:
    """The pulumi-kubernetes provider options the rules depend on (its inputs, or the default provider's
    ``kubernetes:`` stack config)."""

    config_map_mutable: bool = False
    secret_mutable: bool = False

    @classmethod
    def of(cls, inputs: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ProviderFlags:
        """The flags of a provider with these inputs, run with this environment (None: the variables are unset).

        Facts (provider/pkg/provider/provider.go, Configure): ``enableConfigMapMutable`` / ``enableSecretMutable``
        when the provider has them, else PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE / PULUMI_K8S_ENABLE_SECRET_MUTABLE is
        "true"; off by default.
        """

        def flag(key: str, variable: str) -> bool:
            if inputs.get(key) is not None:
                return truthy(inputs[key])
            return (env or {}).get(variable) == "true"

        return cls(
            config_map_mutable=flag("enableConfigMapMutable", "PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE"),
            secret_mutable=flag("enableSecretMutable", "PULUMI_K8S_ENABLE_SECRET_MUTABLE"),
        )


def kind_of(inputs: Mapping[str, Any]) -> str:
    return str(inputs.get("kind", ""))


def rules_for(inputs: Mapping[str, Any]) -> list[ImmutableField]:
    """The rows that apply to an object of this kind and apiVersion."""
    api_version = str(inputs.get("apiVersion"))
    return [
        rule
        for rule in IMMUTABLE_FIELDS
        if kind_of(inputs) in rule.kinds
        and api_group(api_version) == rule.group
        and (not rule.api_versions or api_version in rule.api_versions)
    ]


def rule_tokens(rule: ImmutableField) -> tuple[str | int, ...]:
    return pattern(rule.path)


def condition_holds(rule: ImmutableField, old: Mapping[str, Any], new: Mapping[str, Any], flags: ProviderFlags) -> bool:
    """Whether a conditional row applies to this pair of objects (an unconditional one always does)."""
    if rule.condition == "set":
        return value_at(old, rule_tokens(rule)) is not ABSENT
    if rule.condition == "was-immutable":
        return truthy(old.get("immutable")) and not truthy(new.get("immutable"))
    if rule.condition == "stored-immutable":
        return truthy(old.get("immutable"))
    if rule.condition == "not-external-name-switch":
        types = {str((o.get("spec") or {}).get("type", "ClusterIP")) for o in (old, new)}
        return "ExternalName" not in types or len(types) == 1
    immutable = truthy(old.get("immutable")) or truthy(new.get("immutable"))
    if rule.condition == "secret-data-replaces":
        return immutable or not flags.secret_mutable
    if rule.condition == "configmap-data-replaces":
        return immutable or not flags.config_map_mutable
    return True


def replacing_rule(
    change: FieldChange, old: Mapping[str, Any], new: Mapping[str, Any], flags: ProviderFlags
) -> ImmutableField | None:
    """The REPLACE row this change hits, if any: pulumi-kubernetes' Diff then answers "replace"."""
    return next(
        (
            rule
            for rule in rules_for(new)
            if rule.effect == REPLACE and reaches(rule_tokens(rule), change) and condition_holds(rule, old, new, flags)
        ),
        None,
    )


def refusal(change: FieldChange, old: Mapping[str, Any], new: Mapping[str, Any], flags: ProviderFlags) -> str | None:
    """Why the API server refuses this change as an update (None: it accepts it)."""
    for rule in rules_for(new):
        if rule.effect != REFUSE or not reaches(rule_tokens(rule), change):
            continue
        if any(covers(pattern(u), change.path) for u in rule.unless):
            continue
        if condition_holds(rule, old, new, flags):
            return rule.why
    if kind_of(new) == "PersistentVolumeClaim" and change.path == ("spec", "resources", "requests", "storage"):
        before, after = quantity(change.old), quantity(change.new)
        if before is not None and after is not None and after < before:
            return "storage shrink is refused: a claim's storage request can only grow"
    return None


#: The fields that name an object (``changes_identity``).
IDENTITY_FIELDS = ("metadata.name", "metadata.namespace")
#: The annotation pulumi-kubernetes' Check sets on an object it named itself (``<resource name>-<random>``).
AUTONAMED = "pulumi.com/autonamed"


def changes_identity(change: FieldChange) -> bool:
    """Whether the change renames the object or moves it to another namespace: pulumi-kubernetes replaces the
    object then, whatever its kind (custom resources and Patch resources too).

    Facts (provider/pkg/provider/diff.go, forceNewProperties: every kind's forceNew list starts with
    metadataForceNewProperties(".metadata"); provider/pkg/provider/provider.go, Diff: a Patch resource's forceNew
    fields are these two alone).
    """
    return any(covers(pattern(field), change.path) for field in IDENTITY_FIELDS)


def deletes_before_replace(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether pulumi-kubernetes deletes the old object before it creates the new one, when it replaces it: only
    when the program names the object (metadata.name set, not autonamed) and the replacement keeps the old name and
    namespace, since two objects of one name cannot exist at once. An object without metadata.name gets a fresh
    name for its replacement, which is created first.

    Facts (provider/pkg/provider/provider.go, Diff: ``deleteBeforeReplace``; provider/pkg/metadata/naming.go,
    IsNamed and IsAutonamed: the ``pulumi.com/autonamed`` annotation its Check sets).
    """
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    name = new_meta.get("name")
    autonamed = truthy((new_meta.get("annotations") or {}).get(AUTONAMED))
    return (
        bool(name)
        and not autonamed
        and name == old_meta.get("name")
        and new_meta.get("namespace") == old_meta.get("namespace")
    )


# ------------------------------------------------------------------------------------------------ provider config

#: The wire value of an unknown (a value only known after a deployment).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def active_cluster(kubeconfig: Any, overrides: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The active context's cluster entry of a kubeconfig (a YAML/JSON text or a mapping), after the provider's
    ``context`` and ``cluster`` overrides (util.go, getActiveClusterFromConfig); None when not found."""
    if kubeconfig in (None, ""):
        return None
    config = yaml.safe_load(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    context_name = (overrides or {}).get("context") or config.get("current-context")
    context = next((c["context"] for c in config.get("contexts") or [] if c.get("name") == context_name), None)
    if context is None:
        return None
    cluster_name = (overrides or {}).get("cluster") or context.get("cluster")
    return next((c["cluster"] for c in config.get("clusters") or [] if c.get("name") == cluster_name), None)


def provider_replacement(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """Why the new provider replaces the old one (None: it does not), as pulumi-kubernetes' DiffConfig decides.

    Facts (provider/pkg/provider/provider.go, DiffConfig):
    - no change at all: no replace;
    - ``clusterIdentifier`` changed (not added or removed) replaces; present and unchanged, nothing else replaces;
    - an unknown ``kubeconfig``, ``context`` or ``cluster`` replaces (it cannot tell the cluster);
    - ``renderYamlToDirectory`` changed replaces;
    - the active cluster of the old and the new kubeconfig (with the ``context`` and ``cluster`` overrides) differ:
      replace. An absent kubeconfig is *not* the
      ambient one: it is an empty config, so a move from ambient to explicit (or back) never replaces, whatever
      cluster either names;
    - everything else (the mutable flags, namespace, version) is an update of the provider.
    """
    if dict(old) == dict(new):
        return None
    identifier = "clusterIdentifier"
    if old.get(identifier) is not None and new.get(identifier) is not None:
        if old[identifier] != new[identifier]:
            return f"clusterIdentifier changed ({old[identifier]} -> {new[identifier]})"
        return None
    for key in ("kubeconfig", "context", "cluster"):
        if new.get(key) == UNKNOWN:
            return f"{key} is unknown during preview: the provider cannot tell the cluster, so it replaces"
    if old.get("renderYamlToDirectory") != new.get("renderYamlToDirectory"):
        return "renderYamlToDirectory changed"
    before, after = active_cluster(old.get("kubeconfig"), old), active_cluster(new.get("kubeconfig"), new)
    if before is not None and after is not None and before != after:
        changed = ", ".join(sorted(k for k in {*before, *after} if before.get(k) != after.get(k)))
        return f"the kubeconfig's active cluster changed ({changed}): pulumi-kubernetes takes it for another cluster"
    return None
