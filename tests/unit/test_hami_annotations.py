"""HAMi annotation codecs: pinned to the strings HAMi writes, plus round-trip properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.hami_annotations import (
    NODE_HANDSHAKE,
    NODE_LOCK,
    NODE_NVIDIA_REGISTER,
    NODE_NVIDIA_SCORE,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    AnnotationDecodeError,
    ContainerDevice,
    DeviceMode,
    Handshake,
    HandshakePhase,
    MigPlacement,
    MigProfile,
    NodeLock,
    RegisteredDevice,
    decode_handshake,
    decode_node_devices,
    decode_node_lock,
    decode_pair_scores,
    decode_pod_devices,
    encode_handshake,
    encode_node_devices,
    encode_node_lock,
    encode_pair_scores,
    encode_pod_devices,
)

UUID_A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
UUID_B = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
V100 = "NVIDIA-Tesla V100-PCIE-32GB"

# ---------------------------------------------------------------------------
# Node register


def test_encode_node_devices_is_go_marshal_with_omitempty() -> None:
    devices = [
        RegisteredDevice(UUID_B, 0, 10, 32768, 100, V100, 0, DeviceMode.HAMI_CORE, True),
        RegisteredDevice(UUID_A, 1, 10, 32768, 100, V100, 1, DeviceMode.HAMI_CORE, False),
    ]
    assert encode_node_devices(devices) == (
        f'[{{"id":"{UUID_B}","count":10,"devmem":32768,"devcore":100,"type":"{V100}",'
        '"mode":"hami-core","health":true},'
        f'{{"id":"{UUID_A}","index":1,"count":10,"devmem":32768,"devcore":100,"type":"{V100}",'
        '"numa":1,"mode":"hami-core"}]'
    )


def test_encode_node_devices_writes_mig_profiles_before_health() -> None:
    profile = MigProfile("1g.10gb", 9856, 14, 1, (MigPlacement(0, 1), MigPlacement(1, 1)))
    device = RegisteredDevice(
        UUID_A, 0, 7, 81920, 100, "NVIDIA-H100", 0, "mig", True, mig_profiles=(profile,)
    )
    assert encode_node_devices([device]) == (
        f'[{{"id":"{UUID_A}","count":7,"devmem":81920,"devcore":100,"type":"NVIDIA-H100",'
        '"mode":"mig","migProfiles":[{"name":"1g.10gb","memoryMB":9856,"core":14,'
        '"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1}]}],'
        '"health":true}]'
    )


def test_encode_escapes_like_go() -> None:
    device = RegisteredDevice("GPU-x", type="A<B>&C\u2028é")
    assert encode_node_devices([device]) == (
        '[{"id":"GPU-x","type":"A\\u003cB\\u003e\\u0026C\\u2028é"}]'
    )
    assert encode_node_devices([]) == "[]"


def test_decode_legacy_register_from_hami_protocol_doc() -> None:
    value = (
        f"{UUID_B},10,32768,100,{V100},0,true,0,hami-core:"
        f"{UUID_A},10,32768,100,{V100},0,true,1,hami-core:"
    )
    assert decode_node_devices(value) == [
        RegisteredDevice(UUID_B, 0, 10, 32768, 100, V100, 0, "hami-core", True),
        RegisteredDevice(UUID_A, 1, 10, 32768, 100, V100, 0, "hami-core", True),
    ]


def test_decode_legacy_seven_fields_defaults_index_and_mode() -> None:
    value = "MLU-45013011-2257,10,23308,0,MLU-MLU370-X4,1,F:"
    assert decode_node_devices(value) == [
        RegisteredDevice("MLU-45013011-2257", 0, 10, 23308, 0, "MLU-MLU370-X4", 1, "hami-core")
    ]


def test_decode_json_is_lenient_where_go_is() -> None:
    value = (
        '[{"ID":"GPU-a","Index":2,"count":4,"devmem":null,"devicevendor":"NVIDIA",'
        '"custominfo":{"x":1},"Health":true}]'
    )
    assert decode_node_devices(value) == [
        RegisteredDevice("GPU-a", index=2, count=4, health=True, custom_info={"x": 1})
    ]
    assert decode_node_devices("null") == []
    assert decode_node_devices("  []  ") == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{}", "expected a JSON array of devices"),
        ("[1]", "device 0 must be a JSON object"),
        ("[null]", "device 0 must be a JSON object"),
        ('[{"id":"a","count":1.0}]', "count must be an int, got float"),
        ('[{"id":"a","count":2147483648}]', "count 2147483648 is outside"),
        ('[{"id":"a","index":-1}]', "index -1 is outside"),
        ('[{"id":"a","health":"true"}]', "health must be a bool"),
        ('[{"id":7}]', "id must be a string"),
        ('[{"id":"a","migProfiles":{}}]', "migProfiles must be a JSON array"),
        ("[", "not valid JSON"),
        ("GPU-a,10,1,100,T,0,true", "missing device separator ':'"),
        ("GPU-a,10,1,100:", "has 4 fields, expected 7 or 9"),
        ("GPU-a,ten,1,100,T,0,true:", "count 'ten' is not an integer"),
        ("GPU-a,1,1,100,T,0,yes:", "health 'yes' is not a boolean"),
        ("GPU-a,1, 1,100,T,0,true:", "memory ' 1' is not an integer"),
        ("GPU-a,1,1,100,T,0,true,-1,mig:", "index must not be negative"),
        ("GPU-a,1,99999999999,100,T,0,true:", "memory 99999999999 is out of range"),
    ],
)
def test_decode_node_devices_rejects_with_the_annotation_named(value: str, reason: str) -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_node_devices(value)
    assert caught.value.annotation == NODE_NVIDIA_REGISTER
    assert str(caught.value).startswith(f"annotation {NODE_NVIDIA_REGISTER}: ")
    assert reason in str(caught.value)


def test_decode_node_devices_names_another_vendors_annotation() -> None:
    with pytest.raises(AnnotationDecodeError, match=r"hami\.io/node-dcu-register"):
        decode_node_devices("garbage", annotation="hami.io/node-dcu-register")


_int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_uint32 = st.integers(min_value=0, max_value=2**32 - 1)
_mig_profiles = st.builds(
    MigProfile,
    name=st.text(max_size=8),
    memory_mb=_int32,
    core=_int32,
    slice_count=_uint32,
    placements=st.lists(st.builds(MigPlacement, _uint32, _uint32), max_size=2).map(tuple),
)
_registered_devices = st.builds(
    RegisteredDevice,
    id=st.text(max_size=40),
    index=st.integers(min_value=0, max_value=2**64 - 1),
    count=_int32,
    devmem=_int32,
    devcore=_int32,
    type=st.text(max_size=30),
    numa=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    mode=st.sampled_from(["", *DeviceMode]).map(str),
    health=st.booleans(),
    mig_profiles=st.lists(_mig_profiles, max_size=2).map(tuple),
)


@given(st.lists(_registered_devices, max_size=4))
def test_node_devices_json_round_trip(devices: list[RegisteredDevice]) -> None:
    assert decode_node_devices(encode_node_devices(devices)) == devices


# Real UUIDs and types start with a letter or digit; a leading "[" or "{" would mean JSON.
_legacy_text = st.builds(
    str.__add__,
    st.sampled_from("GMN0123456789"),
    st.text(st.characters(exclude_characters=",:", exclude_categories=("Cs",)), max_size=20),
)


@given(st.lists(st.tuples(_legacy_text, _int32, _int32, _int32, _legacy_text, st.booleans())))
def test_node_devices_legacy_nine_fields_decode(
    rows: list[tuple[str, int, int, int, str, bool]],
) -> None:
    value = "".join(
        f"{uuid},{count},{mem},{core},{kind},{position},{str(health).lower()},{position},mps:"
        for position, (uuid, count, mem, core, kind, health) in enumerate(rows)
    )
    if not rows:
        value = ":"
    expected = [
        RegisteredDevice(uuid, position, count, mem, core, kind, position, "mps", health)
        for position, (uuid, count, mem, core, kind, health) in enumerate(rows)
    ]
    assert decode_node_devices(value) == expected


# ---------------------------------------------------------------------------
# Pod device lists

PROTOCOL_EXAMPLE = f"{UUID_A},NVIDIA,3000,0:;{UUID_A},NVIDIA,5000,0:;"


def test_pod_devices_match_the_protocol_example() -> None:
    pod_devices = [
        [ContainerDevice(UUID_A, "NVIDIA", 3000, 0)],
        [ContainerDevice(UUID_A, "NVIDIA", 5000, 0)],
    ]
    assert encode_pod_devices(pod_devices) == PROTOCOL_EXAMPLE
    assert decode_pod_devices(PROTOCOL_EXAMPLE) == pod_devices


def test_empty_containers_are_kept_in_place() -> None:
    pod_devices = [
        [],
        [ContainerDevice(UUID_A, "NVIDIA", 1000, 30), ContainerDevice(UUID_B, "NVIDIA", 2000, 0)],
        [],
    ]
    encoded = encode_pod_devices(pod_devices)
    assert encoded == f";{UUID_A},NVIDIA,1000,30:{UUID_B},NVIDIA,2000,0:;;"
    assert decode_pod_devices(encoded) == pod_devices
    assert encode_pod_devices([[]]) == ";"
    assert decode_pod_devices(";") == [[]]
    assert decode_pod_devices("") == []


def test_decode_pod_devices_tolerates_what_go_tolerates() -> None:
    unterminated = f"{UUID_A},NVIDIA,3000,0"
    assert decode_pod_devices(unterminated) == [[ContainerDevice(UUID_A, "NVIDIA", 3000, 0)]]
    extra_fields = f"{UUID_A},NVIDIA,3000,0,idx:;"
    assert decode_pod_devices(extra_fields) == [[ContainerDevice(UUID_A, "NVIDIA", 3000, 0)]]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("GPU-a,NVIDIA,1:;", "has fewer than 4 fields"),
        ("GPU-a:;", "has fewer than 4 fields"),
        ("GPU-a,NVIDIA,1,x:;", "cores 'x' is not an integer"),
        ("GPU-a,NVIDIA, 1,0:;", "memory ' 1' is not an integer"),
        ("GPU-a,NVIDIA,1.0,0:;", "memory '1.0' is not an integer"),
        ("GPU-a,NVIDIA,,0:;", "memory '' is not an integer"),
        ("GPU-a,NVIDIA,2147483648,0:;", "memory 2147483648 is out of range"),
        ("GPU-a,NVIDIA,0,-2147483649:;", "cores -2147483649 is out of range"),
    ],
)
def test_decode_pod_devices_rejects(value: str, reason: str) -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_pod_devices(value, annotation=VGPU_DEVICES_ALLOCATED)
    assert caught.value.annotation == VGPU_DEVICES_ALLOCATED
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("uuid", "kind", "mem", "cores"),
    [
        ("GPU;a", "NVIDIA", 1, 1),
        ("GPU-a", "NV:", 1, 1),
        ("a,b", "NVIDIA", 1, 1),
        ("a", "b", 2**31, 0),
        ("a", "b", 0, -(2**31) - 1),
    ],
)
def test_container_device_refuses_values_that_would_not_round_trip(
    uuid: str, kind: str, mem: int, cores: int
) -> None:
    with pytest.raises(ValueError):
        ContainerDevice(uuid, kind, mem, cores)


def test_pod_devices_round_trip_what_hamis_encoder_writes_at_the_edges() -> None:
    pod_devices = [
        [ContainerDevice("", "", -(2**31), 2**31 - 1)],
        [],
        [ContainerDevice(UUID_A, "", 0, -1), ContainerDevice("", "NVIDIA", 2**31 - 1, -(2**31))],
    ]
    encoded = encode_pod_devices(pod_devices)
    assert encoded == (
        f",,-2147483648,2147483647:;;{UUID_A},,0,-1:,NVIDIA,2147483647,-2147483648:;"
    )
    assert decode_pod_devices(encoded) == pod_devices


_pod_text = st.text(
    st.characters(exclude_characters=",:;", exclude_categories=("Cs",)), max_size=20
)
_int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_container_devices = st.builds(
    ContainerDevice, uuid=_pod_text, type=_pod_text, usedmem=_int32, usedcores=_int32
)


@given(st.lists(st.lists(_container_devices, max_size=3), max_size=5))
def test_pod_devices_round_trip(pod_devices: list[list[ContainerDevice]]) -> None:
    assert decode_pod_devices(encode_pod_devices(pod_devices)) == pod_devices


def test_pod_devices_default_annotation_is_devices_to_allocate() -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_pod_devices("x:;")
    assert caught.value.annotation == VGPU_DEVICES_TO_ALLOCATE


# ---------------------------------------------------------------------------
# Node lock


def test_node_lock_is_rfc3339_namespace_pod() -> None:
    lock = NodeLock(datetime(2026, 11, 29, 20, 41, 5, 999999, tzinfo=UTC), "team-a", "infer-0")
    assert encode_node_lock(lock) == "2026-11-29T20:41:05Z,team-a,infer-0"
    assert decode_node_lock("2026-11-29T20:41:05Z,team-a,infer-0") == NodeLock(
        datetime(2026, 11, 29, 20, 41, 5, tzinfo=UTC), "team-a", "infer-0"
    )


def test_node_lock_accepts_go_local_offsets_fractions_and_bare_times() -> None:
    lock = decode_node_lock("2026-11-30T04:41:05.123456789+08:00,ns,pod")
    assert lock.locked_at == datetime(2026, 11, 29, 20, 41, 5, 123456, tzinfo=UTC)
    bare = decode_node_lock("2026-11-29T20:41:05Z")
    assert (bare.namespace, bare.pod) == ("", "")
    assert encode_node_lock(bare) == "2026-11-29T20:41:05Z"


def test_node_lock_converts_aware_times_to_utc() -> None:
    shanghai = timezone(timedelta(hours=8))
    lock = NodeLock(datetime(2026, 11, 30, 4, 41, 5, tzinfo=shanghai), "a", "b")
    assert encode_node_lock(lock) == "2026-11-29T20:41:05Z,a,b"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("2026-11-29T20:41:05Z,ns", "expected time,namespace,pod"),
        ("2026-11-29T20:41:05Z,a,b,c", "expected time,namespace,pod"),
        ("2026-11-29 20:41:05Z,ns,pod", "is not RFC 3339"),
        ("2026-11-29t20:41:05z,ns,pod", "is not RFC 3339"),
        ("2026-13-29T20:41:05Z,ns,pod", "month must be in 1..12"),
        ("2026-11-29T20:41:05Z,,pod", "set together"),
    ],
)
def test_node_lock_rejects(value: str, reason: str) -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_node_lock(value)
    assert caught.value.annotation == NODE_LOCK
    assert reason in str(caught.value)


def test_node_lock_refuses_naive_times_and_commas() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        NodeLock(datetime(2026, 1, 1), "a", "b")
    with pytest.raises(ValueError, match="must not contain ','"):
        NodeLock(datetime(2026, 1, 1, tzinfo=UTC), "a,b", "c")


_aware_seconds = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)
).map(lambda moment: moment.replace(microsecond=0))
_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(_aware_seconds, _names, _names)
def test_node_lock_round_trip(locked_at: datetime, namespace: str, pod: str) -> None:
    lock = NodeLock(locked_at, namespace, pod)
    assert decode_node_lock(encode_node_lock(lock)) == lock


# ---------------------------------------------------------------------------
# Handshake


def test_handshake_is_phase_and_go_datetime() -> None:
    handshake = Handshake(HandshakePhase.REQUESTING, datetime(2024, 1, 10, 4, 6, 57, tzinfo=UTC))
    assert encode_handshake(handshake) == "Requesting_2024-01-10 04:06:57"
    assert decode_handshake("Requesting_2024-01-10 04:06:57") == handshake


@pytest.mark.parametrize(
    ("value", "phase"),
    [
        ("Reported_2024-01-23 04:30:04", HandshakePhase.REPORTED),
        ("Deleted_2024-01-23 04:30:04", HandshakePhase.DELETED),
        ("Deleted_2024.01.23 04:30:04", HandshakePhase.DELETED),
        ("Requesting_2024-01-23 4:30:04", HandshakePhase.REQUESTING),
    ],
)
def test_handshake_reads_every_phase_and_the_old_layout(value: str, phase: HandshakePhase) -> None:
    decoded = decode_handshake(value)
    assert decoded.phase is phase
    assert decoded.at == datetime(2024, 1, 23, 4, 30, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("Requesting", "has no '_'"),
        ("Asking_2024-01-23 04:30:04", "unknown phase 'Asking'"),
        ("Requesting_2024-01-23T04:30:04", "is not YYYY-MM-DD hh:mm:ss"),
        ("Requesting_2024-01.23 04:30:04", "is not YYYY-MM-DD hh:mm:ss"),
        ("Requesting_2024-02-30 04:30:04", "day is out of range"),
    ],
)
def test_handshake_rejects(value: str, reason: str) -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_handshake(value)
    assert caught.value.annotation == NODE_HANDSHAKE
    assert reason in str(caught.value)


@given(st.sampled_from(HandshakePhase), _aware_seconds)
def test_handshake_round_trip(phase: HandshakePhase, at: datetime) -> None:
    handshake = Handshake(phase, at)
    assert decode_handshake(encode_handshake(handshake)) == handshake


# ---------------------------------------------------------------------------
# Topology scores


def test_pair_scores_match_go_marshal() -> None:
    scores = {UUID_A: {"GPU-c": 10, UUID_B: 100}, UUID_B: {UUID_A: 100}, "GPU-lonely": {}}
    assert encode_pair_scores(scores) == (
        f'[{{"uuid":"{UUID_A}","score":{{"{UUID_B}":100,"GPU-c":10}}}},'
        f'{{"uuid":"{UUID_B}","score":{{"{UUID_A}":100}}}},'
        '{"uuid":"GPU-lonely","score":{}}]'
    )


def test_decode_pair_scores() -> None:
    value = f'[{{"uuid":"{UUID_A}","score":{{"{UUID_B}":200}}}},{{"uuid":"GPU-c"}}]'
    assert decode_pair_scores(value) == {UUID_A: {UUID_B: 200}, "GPU-c": {}}
    assert decode_pair_scores("null") == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{}", "value must be a JSON array"),
        ('[{"uuid":1}]', "uuid must be a string"),
        ('[{"uuid":"a","score":[]}]', "score must be a JSON object"),
        ('[{"uuid":"a","score":{"b":1.5}}]', "must be an integer"),
        ('[{"uuid":"a","score":{"b":true}}]', "must be an integer"),
        ('[{"uuid":"a"},{"uuid":"a"}]', "listed twice"),
    ],
)
def test_decode_pair_scores_rejects(value: str, reason: str) -> None:
    with pytest.raises(AnnotationDecodeError) as caught:
        decode_pair_scores(value)
    assert caught.value.annotation == NODE_NVIDIA_SCORE
    assert reason in str(caught.value)


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.dictionaries(
            st.text(max_size=10), st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4
        ),
        max_size=4,
    )
)
def test_pair_scores_round_trip(scores: dict[str, dict[str, int]]) -> None:
    assert decode_pair_scores(encode_pair_scores(scores)) == scores
