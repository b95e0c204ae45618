"""The emulator's list answers, assembled from per-version encodings, read exactly as
one `json.dumps` of the page, and a new version of an object is encoded afresh."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from simulator.apiserver.list_encoding import ListEncoder, dumps

names = st.text(alphabet="abcdefghij-", min_size=1, max_size=8)


def _object(name: str, version: int, value: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(version)},
        "data": {"value": value},
    }


def _page(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9"},
        "items": items,
    }


@given(
    st.lists(
        st.tuples(names, st.integers(1, 5), st.text(max_size=5)),
        max_size=6,
        unique_by=lambda entry: entry[0],
    )
)
def test_a_list_reads_as_the_page_encoded_at_once(entries: list[tuple[str, int, str]]) -> None:
    page = _page([_object(name, version, value) for name, version, value in entries])
    encoder = ListEncoder()
    assert json.loads(encoder.encode("configmaps", page)) == page
    assert encoder.encode("configmaps", page) == dumps(page)


def test_a_new_version_is_encoded_afresh_and_the_same_version_reused() -> None:
    encoder = ListEncoder()
    first = _object("a", 1, "old")
    encoder.encode("configmaps", _page([first]))
    changed = _object("a", 2, "new")
    assert json.loads(encoder.encode("configmaps", _page([changed])))["items"] == [changed]
    same_version_other_view = {**first, "kind": "Event"}
    shown = json.loads(encoder.encode("events", _page([same_version_other_view])))
    assert shown["items"] == [same_version_other_view]


def test_objects_without_a_version_and_an_empty_list() -> None:
    encoder = ListEncoder(max_entries=1)
    loose = {"metadata": {"name": "x"}}
    assert json.loads(encoder.encode("configmaps", _page([loose, loose]))) == _page([loose, loose])
    assert json.loads(encoder.encode("configmaps", _page([]))) == _page([])
    many = [_object(str(i), 1, "v") for i in range(3)]
    assert json.loads(encoder.encode("configmaps", _page(many))) == _page(many)
