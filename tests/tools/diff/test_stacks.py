"""tools.diff.stacks: two dumps compared stack by stack, and what the comparison prints.

The cases compare small hand-written dumps (tests/support/diff_dumps.py): no git, no plan.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.support.diff_dumps import CLAIM, DEPLOYMENT, STACK, changed, compare, dump, k8s, only_change
from tools.diff.render import render
from tools.diff.report import EXIT_CHANGES, EXIT_ERROR, EXIT_NO_CHANGE, exit_code
from tools.diff.stacks import diff_dumps
from tools.fields import ABSENT, diff_values

# ------------------------------------------------------------------------------------------------ basics


def test_identical_dumps_say_no_changes_and_exit_0() -> None:
    report, text = compare([DEPLOYMENT, CLAIM], [copy.deepcopy(DEPLOYMENT), copy.deepcopy(CLAIM)])
    assert text.splitlines() == [f"diff {report.base_label} -> {report.head_label}: no changes; exit 0"]
    assert exit_code(report) == EXIT_NO_CHANGE


def test_an_update_names_the_field_with_lists_keyed_by_name() -> None:
    def bump(inputs: dict) -> None:
        containers = inputs["spec"]["template"]["spec"]["containers"]
        containers.reverse()  # order aside, only the image changes
        containers[1]["image"] = "ghcr.io/juanfont/headscale:0.29.3"

    report, text = compare([DEPLOYMENT], [changed(DEPLOYMENT, bump)])
    change = only_change(report)
    assert change.action == "update"
    assert (
        'spec.template.spec.containers[name=headscale].image: "ghcr.io/juanfont/headscale:0.29.2" -> '
        '"ghcr.io/juanfont/headscale:0.29.3"' in text
    )
    assert "order changed" in text
    assert exit_code(report) == EXIT_CHANGES
    assert text.splitlines()[-1].startswith("diff base -> head: lab: 1 updated; 0 DATA LOSS")


def test_a_first_named_item_in_an_empty_list_is_named_too() -> None:
    changes = diff_values({"env": []}, {"env": [{"name": "TZ", "value": "UTC"}]})
    assert [c.text for c in changes] == ["env[name=TZ]"]
    assert diff_values([1, 2], [1, 3])[0].text == "[1]"


def test_created_and_deleted_resources_are_listed() -> None:
    service = k8s("Service", "headscale", spec={"ports": [{"name": "http", "port": 8080}]})
    report, text = compare([DEPLOYMENT], [service])
    assert "created\n  +  Service headscale/headscale  (lab-headscale)" in text
    assert "deleted\n  -  Deployment headscale/headscale  (lab-headscale)" in text
    assert exit_code(report) == EXIT_CHANGES


def test_a_multi_line_value_shows_as_a_text_diff() -> None:
    config = k8s("ConfigMap", "headscale-config", data={"config.yaml": "a: 1\nb: 2\nc: 3\n"})
    new = changed(config, lambda i: i["data"].update({"config.yaml": "a: 1\nb: 20\nc: 3\n"}))
    _, text = compare([config], [new], kubernetesConfig={"kubernetes:enableConfigMapMutable": "true"})
    assert 'data["config.yaml"]: text changed' in text
    assert "-b: 2\n" in text + "\n"
    assert "+b: 20" in text


# ------------------------------------------------------------------------------------------------ stacks, outputs


def test_outputs_are_compared_and_many_changes_summarized() -> None:
    before = dump(CLAIM, outputs={"stage": "sqlite", "table": [{"v": i} for i in range(10)], "key": {"secret": "1"}})
    after = dump(CLAIM, outputs={"stage": "migrating", "table": [{"v": -i} for i in range(10)], "key": {"secret": "2"}})
    report = diff_dumps(before, after)
    text = render(report)
    assert 'stage: "sqlite" -> "migrating"' in text
    assert "table: 9 values changed" in text
    assert "key: changed (secret)" in text
    assert exit_code(report) == EXIT_CHANGES


def test_a_stack_that_does_not_plan_in_the_head_is_an_error() -> None:
    report = diff_dumps(dump(CLAIM), dump(error="ConfigError: headscale-ha:cluster: bad"))
    assert exit_code(report) == EXIT_ERROR
    assert "does not plan in the working tree: ConfigError" in render(report)


def test_added_and_removed_stack_files_are_notes() -> None:
    base = dump(CLAIM)
    head = copy.deepcopy(base)
    head["stacks"]["site/other"] = {**head["stacks"].pop(f"site/{STACK}"), "stack": "other"}
    text = render(diff_dumps(base, head))
    assert "stack file removed" in text
    assert "new stack" in text


def test_unrequested_stacks_are_not_compared_and_unknown_names_are_errors() -> None:
    base = dump(CLAIM)
    head = dump()
    head["stacks"][f"site/{STACK}"]["requested"] = False
    base["stacks"][f"site/{STACK}"]["requested"] = False
    assert render(diff_dumps(base, head)).endswith(": no changes; exit 0")
    report = diff_dumps(dump(CLAIM), dump(CLAIM), stacks=["nope"])
    assert exit_code(report) == EXIT_ERROR


def test_output_records_are_paired_by_their_key_not_their_position() -> None:
    rows = [{"scenario": name, "rto": "1 s"} for name in ("node", "cluster")]
    inserted = [rows[0], {"scenario": "nfs", "rto": "0 s"}, rows[1]]
    report = diff_dumps(
        dump(outputs={"availability": {"failures": rows}, "limits": ["a", "b"]}),
        dump(outputs={"availability": {"failures": inserted}, "limits": ["a", "new", "b"]}),
    )
    (stack,) = report.stacks
    assert [(c.text, c.old, c.new) for c in stack.outputs] == [
        ("availability.failures[scenario=nfs]", ABSENT, {"scenario": "nfs", "rto": "0 s"}),
        ("limits[1]", ABSENT, "new"),
    ]
    assert "availability.failures[scenario=nfs]: absent -> " in render(report)


# ------------------------------------------------------------------------------------------------ determinism


def _claim(name: str, **spec: Any) -> dict[str, Any]:
    return k8s("PersistentVolumeClaim", name, spec=spec)


def test_data_loss_lines_follow_the_urns_not_the_registration_order() -> None:
    """A dump lists resources in the order the program registered them, which async registration varies between
    runs: the DATA LOSS lines (of replaced and of deleted objects) and the warnings read the same either way."""
    base = [_claim(f"data-{n}", storageClassName="a") for n in "ab"]
    base += [_claim(f"small-{n}", resources={"requests": {"storage": "2Gi"}}) for n in "ab"]
    base += [_claim(f"old-{n}") for n in "ab"]
    head = [changed(c, lambda i: i["spec"].update(storageClassName="b")) for c in base[:2]]
    head += [changed(c, lambda i: i["spec"].update(resources={"requests": {"storage": "1Gi"}})) for c in base[2:4]]
    runs = [compare(b, h) for b in (base, base[::-1]) for h in (head, head[::-1])]
    assert len({text for _, text in runs}) == 1, "the report depends on the order of the dumps"
    (stack,) = runs[0][0].stacks
    objects = [re.search(r"PersistentVolumeClaim headscale/([\w-]+)", f.text)[1] for f in stack.findings]
    assert objects == ["data-a", "data-b", "old-a", "old-b", "small-a", "small-b"]
