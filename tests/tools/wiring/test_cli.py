"""The command line: findings and a summary, exit status 1 with findings, `kind: List` unwrapped."""

from __future__ import annotations

from tests.support.wiring_objects import service, web
from tools.wiring.cli import main


def test_cli_prints_findings_and_a_summary(tmp_path, capsys) -> None:
    import yaml

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text(yaml.safe_dump_all([web(), service(selector={"app": "api"})]))
    (tmp_path / "notes.txt").write_text("not yaml: [")
    assert main([str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 objects, 1 findings"
    assert lines[0].startswith("Service/app/web: spec.selector: ")


def test_cli_exit_zero_without_findings(tmp_path, capsys) -> None:
    import yaml

    path = tmp_path / "list.yml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [web(), service()]}))
    assert main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["2 objects, 0 findings"]
