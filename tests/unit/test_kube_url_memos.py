"""After a burst the controller empties the URL library's memos of the burst's request
URLs (`forget_request_urls`): each memo entry keeps a parsed URL resident."""

from __future__ import annotations

import yarl

from dra_driver.kube.rest import forget_request_urls

STATUS_URL = "http://127.0.0.1:6443/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/{}/status"


def test_a_memoized_url_is_parsed_afresh_after_the_memos_are_forgotten():
    parsed = yarl.URL(STATUS_URL.format("claim-0"))
    assert yarl.URL(STATUS_URL.format("claim-0")) is parsed
    forget_request_urls()
    assert yarl.URL(STATUS_URL.format("claim-0")) is not parsed


def test_forgetting_counts_the_entries_and_leaves_none():
    forget_request_urls()
    for index in range(5):
        yarl.URL(STATUS_URL.format(f"claim-{index}"))
    assert forget_request_urls() >= 5
    assert forget_request_urls() == 0
