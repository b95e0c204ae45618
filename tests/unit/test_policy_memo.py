"""policy_memo: the member chains a policy's CEL reads, and the projection keyed on them."""

from __future__ import annotations

from simulator.apiserver.policy_memo import (
    DecisionMemo,
    policy_expressions,
    projection,
    read_paths,
)


def test_read_paths_are_the_maximal_root_chains() -> None:
    paths = read_paths(
        [
            "has(object.status.allocation) && request.userInfo.username in variables.allowed",
            "object.spec.containers.filter(c, c.name == 'x').size() > 0",
            "size(oldObject.spec) > 0 && object.metadata.labels['a'] == 'b'",
            "has(object.spec.volumes) && object.spec.volumes.size() > size(oldObject)",
        ]
    )
    assert paths == (
        ("has()", "object", "spec", "volumes"),
        ("has()", "object", "status", "allocation"),
        ("object", "metadata", "labels"),
        ("object", "spec", "containers"),
        ("object", "spec", "volumes"),
        ("request", "userInfo", "username"),
        ("size()", "oldObject"),
        ("size()", "oldObject", "spec"),
    )


def test_an_expression_that_does_not_compile_turns_memoizing_off() -> None:
    assert read_paths(["object.spec ==", "true"]) is None


def test_projection_tells_missing_from_null_and_keeps_non_maps_whole() -> None:
    paths = (("object", "spec", "x"), ("object", "status", "y"))
    with_null = projection({"object": {"spec": {"x": None}, "status": [1]}}, paths)
    missing = projection({"object": {"spec": {}, "status": [1]}}, paths)
    other_list = projection({"object": {"spec": {"x": None}, "status": [2]}}, paths)
    assert len({with_null, missing, other_list}) == 3
    assert projection({"object": {"spec": {"x": None}, "status": [1], "z": 5}}, paths) == with_null
    # A value where the chain ends, and the same value where it cannot go on, differ.
    assert projection({"object": {"spec": 5}}, paths[:1]) != projection(
        {"object": {"spec": {"x": 5}}}, paths[:1]
    )


def test_probes_read_presence_and_size_only() -> None:
    has = (("has()", "object", "spec", "claims"),)
    size = (("size()", "object", "spec", "claims"),)
    one = {"object": {"spec": {"claims": [{"name": "a"}]}}}
    other = {"object": {"spec": {"claims": [{"name": "b"}]}}}
    two = {"object": {"spec": {"claims": [{"name": "a"}, {"name": "b"}]}}}
    none = {"object": {"spec": {}}}
    no_spec: dict[str, dict[str, str]] = {"object": {}}
    assert projection(one, has) == projection(two, has) != projection(none, has)
    assert projection(none, has) != projection(no_spec, has)
    assert projection(one, size) == projection(other, size) != projection(two, size)


def test_every_expression_of_a_policy_is_read() -> None:
    spec = {
        "matchConditions": [{"name": "m", "expression": "a"}],
        "variables": [{"name": "v", "expression": "b"}],
        "validations": [{"expression": "c", "messageExpression": "d"}, {"expression": "e"}],
    }
    assert policy_expressions(spec) == ["a", "b", "c", "d", "e"]


def test_the_memo_keys_on_the_policy_version() -> None:
    memo = DecisionMemo(size=2)
    first = {"metadata": {"uid": "u", "resourceVersion": "1"}}
    second = {"metadata": {"uid": "u", "resourceVersion": "2"}}
    memo.put(first, "k", ("denied",))
    assert memo.get(first, "k") == ("denied",)
    assert memo.get(second, "k") is None
    memo.put(first, "k2", ())
    memo.put(first, "k3", ())
    assert memo.get(first, "k") is None
    assert memo.get(first, "k3") == ()
