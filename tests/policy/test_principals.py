"""policy/principals.py: every user token of a policy found with its path, and matched as Headscale matches it
(the token without its trailing ``@`` is a user's name or e-mail)."""

from __future__ import annotations

from headscale_ha.policy.principals import ConfiguredUser, PolicyUsers, policy_users, user_tokens

ALICE = ConfiguredUser(name="alice", email="alice@example.com")
BOB = ConfiguredUser(name="bob")


def test_every_token_is_found_with_its_path_and_without_its_ports() -> None:
    policy = {
        "groups": {"group:admins": ["alice@", "group:none"]},
        "tagOwners": {"tag:server": ["bob@"]},
        "acls": [{"action": "accept", "src": ["alice@example.com"], "dst": ["bob@:22,443", "tag:server:*"]}],
        "ssh": [{"action": "accept", "src": ["alice@"], "dst": ["alice@"], "users": ["root", "localpart:*@x.test"]}],
        "autoApprovers": {"exitNode": ["carol@"]},
        "tests": [{"src": "dave@", "accept": ["tag:server:22"]}],
    }
    assert list(user_tokens(policy)) == [
        ('groups["group:admins"][0]', "alice@"),
        ('tagOwners["tag:server"][0]', "bob@"),
        ("acls[0].src[0]", "alice@example.com"),
        ("acls[0].dst[0]", "bob@"),
        ("ssh[0].src[0]", "alice@"),
        ("ssh[0].dst[0]", "alice@"),
        ("autoApprovers.exitNode[0]", "carol@"),
        ("tests[0].src", "dave@"),
    ]


def test_a_user_matches_by_name_or_email_and_nothing_else() -> None:
    assert ALICE.matches("alice@")
    assert ALICE.matches("alice@example.com")
    assert not ALICE.matches("alice@example.org")
    assert not ALICE.matches("Alice@")  # Headscale compares exactly
    assert not BOB.matches("@")  # no e-mail: an empty token is nobody


def test_unknown_tokens_and_unnamed_users_are_both_reported() -> None:
    policy = {"groups": {"group:ops": ["carol@", "alice@example.com"]}}
    assert policy_users(policy, [ALICE, BOB]) == PolicyUsers(
        unknown=(('groups["group:ops"][0]', "carol@"),), unnamed=(BOB,)
    )
