"""kwok's part in the lab (tests/support/kube_lab.py): the stages that make kwok play the kubelet.

kwok v0.7 ``Stage`` resources, after its kustomize/stage/node/fast, node/heartbeat-with-lease and pod/fast: given
to kwok with ``--config``, they replace its built-in stages, so what the lab's pods do is written here.
"""

from __future__ import annotations

from typing import Any

_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
#: The node's status: kubelet-like conditions, and the addresses and resources it was registered with.
_NODE_STATUS = """\
{{ $now := Now }}
{{ $since := or .metadata.creationTimestamp $now }}
{{ $kwok := printf "kwok-%s" Version | Quote }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses: {{ toJson .status.addresses }}
allocatable: {{ toJson .status.allocatable }}
capacity: {{ toJson .status.capacity }}
nodeInfo: {architecture: amd64, operatingSystem: linux, bootID: "", machineID: "", osImage: "", systemUUID: "",
  containerRuntimeVersion: {{ $kwok }}, kernelVersion: {{ $kwok }}, kubeProxyVersion: {{ $kwok }},
  kubeletVersion: {{ $kwok }}}
phase: Running
"""
#: A pod bound to the node: started, Ready, with a pod IP from the node's podCIDR (init containers completed,
#: sidecars running).
_POD_READY = """\
{{ $now := Now | Quote }}
conditions:
{{ range list "PodReadyToStartContainers" "Initialized" "Ready" "ContainersReady" }}
- {type: {{ . | Quote }}, status: "True", lastTransitionTime: {{ $now }}}
{{ end }}
{{ range .spec.readinessGates }}
- {type: {{ .conditionType | Quote }}, status: "True", lastTransitionTime: {{ $now }}}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, restartCount: 0, ready: true, started: true,
   state: {running: {startedAt: {{ $now }}}}}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, restartCount: 0, ready: true,
   {{ if eq .restartPolicy "Always" }} started: true, state: {running: {startedAt: {{ $now }}}}}
   {{ else }} state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now }}, finishedAt: {{ $now }}}}}
   {{ end }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName (or .spec.hostNetwork false) (or .metadata.uid "")
  (or .metadata.name "") (or .metadata.namespace "") | Quote }}
phase: Running
startTime: {{ $now }}
"""
#: A Job's running pod: its containers exit 0 and the pod is Succeeded (the Job controller counts it).
_POD_COMPLETE = """\
{{ $now := Now | Quote }}
conditions:
{{ range list "Ready" "ContainersReady" }}
- {type: {{ . | Quote }}, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now }}}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, restartCount: 0, ready: false, started: false,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now }}, finishedAt: {{ $now }}}}}
{{ end }}
phase: Succeeded
"""
#: A Job's running pod whose container fails (exit 1): the pod is Failed; with `backoffLimit: 0` the Job is too.
_POD_FAILED = _POD_COMPLETE.replace("exitCode: 0, reason: Completed", "exitCode: 1, reason: Error").replace(
    "phase: Succeeded", "phase: Failed"
)


def _stage(name: str, kind: str, *expressions: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {"matchExpressions": list(expressions)}}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": body | spec}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)} if values else {"key": key, "operator": operator}


def kwok_stages(held_apps: tuple[str, ...] = (), *, failing_jobs: bool = False) -> list[dict[str, Any]]:
    """What kwok plays of the kubelet, as kwok v0.7 ``Stage`` resources (after its kustomize/stage/node/fast,
    node/heartbeat-with-lease and pod/fast): the node turns Ready and keeps a heartbeat (kwok renews its lease too);
    a pod bound to it turns Running and Ready; a Job's running pod then completes; a pod being deleted loses its
    finalizers and goes (the kubelet's final delete). Given to kwok with ``--config``, they replace its defaults.

    ``held_apps``: pods labelled ``app.kubernetes.io/name`` with one of these are left Pending, for the lab's own
    kubelet (tests/support/kube_lab_pods.py) to run for real and report Ready when they serve. ``failing_jobs``: a
    Job's running pod fails instead of completing (Cluster.set_failing_jobs).
    """
    alive = _expr(".metadata.deletionTimestamp", "DoesNotExist")
    heartbeat = {"durationMilliseconds": 600000, "jitterDurationMilliseconds": 610000}
    held = [_expr('.metadata.labels["app.kubernetes.io/name"]', "NotIn", *held_apps)] if held_apps else []
    return [
        _stage("node-initialize", "Node", _expr(_READY, "NotIn", "True"), next={"statusTemplate": _NODE_STATUS}),
        _stage("node-heartbeat-with-lease", "Node", _expr(".status.phase", "In", "Running"),
               _expr(_READY, "In", "True"), delay=heartbeat, next={"statusTemplate": _NODE_STATUS}),
        _stage("pod-ready", "Pod", alive, _expr(".status.podIP", "DoesNotExist"), *held,
               next={"statusTemplate": _POD_READY}),
        _stage("pod-complete", "Pod", alive, _expr(".status.phase", "In", "Running"),
               _expr(".metadata.ownerReferences.[].kind", "In", "Job"),
               next={"statusTemplate": _POD_FAILED if failing_jobs else _POD_COMPLETE}),
        _stage("pod-delete", "Pod", _expr(".metadata.deletionTimestamp", "Exists"),
               next={"finalizers": {"empty": True}, "delete": True}),
    ]  # fmt: skip
