"""Arbitrary documents at the extender's and webhook's door: a clear InvalidParameterError
or an answer, never another exception (which would surface as a 500)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.legacy.admission import review_pod
from controller.legacy.config import LegacySettings
from controller.legacy.extender import parse_filter_args
from controller.legacy.pod_shape import check_pod_shape
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import pod_request

SETTINGS = LegacySettings()
VENDORS = SETTINGS.vendors()
NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    "cpu",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.sampled_from(["1", "0", "-1", "3k", "500m", "1.5", "1e3", "100", "abc", "", "2Gi"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
quantities = st.dictionaries(st.sampled_from(NAMES), scalars | json_values, max_size=4)
containers = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=4) | scalars,
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": quantities, "requests": quantities}
        )
        | json_values,
        "env": st.lists(st.fixed_dictionaries({"name": st.text(max_size=3)}), max_size=2)
        | json_values,
        "securityContext": st.fixed_dictionaries({}, optional={"privileged": scalars})
        | json_values,
    },
)
annotations = st.dictionaries(
    st.sampled_from(
        [
            "hami.io/gpu-scheduler-policy",
            "hami.io/node-scheduler-policy",
            "hami.io/device-scoring-weights",
            "nvidia.com/use-gputype",
            "nvidia.com/numa-bind",
        ]
    ),
    st.text(max_size=8) | scalars,
    max_size=3,
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=4)},
            optional={"namespace": st.text(max_size=4) | scalars, "annotations": annotations},
        )
        | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(containers | json_values, max_size=3) | json_values,
                "initContainers": st.lists(containers, max_size=2) | json_values,
                "schedulerName": st.sampled_from(["", "default-scheduler", "hami-scheduler", "x"]),
                "nodeName": st.text(max_size=3),
            },
        )
        | json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(pod=pods | json_values, names=st.lists(st.text(max_size=3), max_size=3) | json_values)
def test_filter_input_is_answered_or_refused_clearly(pod: Any, names: Any) -> None:
    try:
        args = parse_filter_args({"Pod": pod, "NodeNames": names})
        pod_request(args.pod, VENDORS, admission_defaults=False)
    except InvalidParameterError:
        pass


@settings(max_examples=300, deadline=None)
@given(pod=pods | json_values)
def test_webhook_input_is_answered_or_refused_clearly(pod: Any) -> None:
    try:
        check_pod_shape(pod, "request.object")
    except InvalidParameterError:
        return
    decision = review_pod(pod, "ns", SETTINGS)
    assert decision.allowed or decision.message
