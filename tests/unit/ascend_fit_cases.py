"""HAMi's Ascend Fit tables, row for row: TestDevices_Fit, TestDevices_Fit_910C and the
910C pairing tests (pkg/device/ascend/device_test.go, device_910c_pairing_test.go, 4707fb02).

HAMi runs every TestDevices_Fit row against each chip of its config, setting
the request type and every device's type to that chip's commonWord (except in
the type-mismatch row) and, in the two uuid rows, the annotation of that
chip's own key; `rows_for` does the same. The nodes of those tests register
dev-0 on NetworkID 0 and dev-1, dev-2 on NetworkID 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami_vendor_cases import FitCase, HamiDevice, HamiRequest

MODE_ANNOTATION = "huawei.com/vnpu-mode"
HAMI_CORE = "hami-core"
NODE_CORE_ANNOTATION = "hami-vnpu-core"
MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


def dev(id: str, **kw: Any) -> HamiDevice:
    """A TestDevices_Fit device: 100 slots and 100 cores unless the row says otherwise."""
    return HamiDevice(id=id, **{"count": 100, "totalcore": 100, **kw})


def net(id: str, network: int, **kw: Any) -> HamiDevice:
    return dev(id, custom_info={"NetworkID": float(network)}, **kw)


@dataclass(frozen=True, slots=True)
class AscendFitRow:
    """A TestDevices_Fit row: the FitCase, the node's annotations, and what HAMi's
    loop changes per chip (uuid annotation, request type)."""

    case: FitCase
    node_annotations: Mapping[str, str] | None = None
    uuid_key: str | None = None
    """`use` or `no-use`: the row adds `hami.io/<uuid_key>-<commonWord>-uuid: dev-0`."""
    keep_type: bool = False
    """The type-mismatch row keeps its own request type."""


def _row(name: str, devices, request: HamiRequest, fit: bool, held: int = 0, **kw) -> AscendFitRow:
    extra = {k: kw.pop(k) for k in ("node_annotations", "uuid_key", "keep_type") if k in kw}
    return AscendFitRow(FitCase(name, tuple(devices), request, fit, held, **kw), **extra)


def _r(nums: int, memreq: int, mempct: int, coresreq: int, type: str = "") -> HamiRequest:
    return HamiRequest(nums=nums, type=type, memreq=memreq, mempct=mempct, coresreq=coresreq)


FIT_ROWS: tuple[AscendFitRow, ...] = (
    _row(
        "fit success",
        [dev("dev-0", totalmem=128), dev("dev-1", totalmem=128)],
        _r(1, 64, 0, 50),
        True,
        1,
        ids=("dev-1",),
    ),
    _row(
        "fit fail: memory not enough",
        [dev("dev-0", totalmem=128)],
        _r(1, 512, 0, 50),
        False,
        reason="1/1 CardInsufficientMemory",
    ),
    _row(
        "fit fail: core not enough",
        [dev("dev-0", totalmem=1024, usedcores=100)],
        _r(1, 512, 0, 50),
        False,
        reason="1/1 CardInsufficientCore",
    ),
    _row(
        "fit fail: type mismatch",
        [dev("dev-0", totalmem=128)],
        _r(1, 512, 0, 50, type="OtherType"),
        False,
        reason="1/1 CardTypeMismatch",
        keep_type=True,
    ),
    _row(
        "fit fail: user assign use uuid mismatch",
        [dev("dev-1", totalmem=1280)],
        _r(2, 512, 0, 50),
        False,
        reason="1/1 CardUuidMismatch",
        uuid_key="use",
    ),
    _row(
        "fit fail: user assign no use uuid match",
        [dev("dev-0", totalmem=1280)],
        _r(2, 512, 0, 50),
        False,
        reason="1/1 CardUuidMismatch",
        uuid_key="no-use",
    ),
    _row(
        "fit fail: card overused",
        [dev("dev-0", used=100, totalmem=1280)],
        _r(1, 512, 0, 50),
        False,
        reason="1/1 CardTimeSlicingExhausted",
    ),
    _row(
        "fit success: but core limit can't exceed 100",
        [dev("dev-0", totalmem=1280)],
        _r(1, 512, 0, 120),
        True,
        1,
        ids=("dev-0",),
    ),
    _row(
        "fit fail: card exclusively",
        [dev("dev-0", used=20, totalmem=1280)],
        _r(1, 512, 0, 100),
        False,
        reason="1/1 ExclusiveDeviceAllocateConflict",
    ),
    _row(
        "fit fail: CardComputeUnitsExhausted",
        [dev("dev-0", used=20, totalmem=1280, usedcores=100)],
        _r(1, 512, 0, 0),
        False,
        reason="1/1 CardComputeUnitsExhausted",
    ),
    _row(
        "fit fail: AllocatedCardsInsufficientRequest",
        [dev("dev-0", used=20, totalmem=1280, usedcores=10)],
        _r(2, 512, 0, 20),
        False,
        reason="1/1 AllocatedCardsInsufficientRequest",
    ),
    _row(
        "fit success: memory percentage",
        [dev("dev-0", used=20, totalmem=1280, usedcores=10)],
        _r(1, 0, 10, 20),
        True,
        1,
        ids=("dev-0",),
    ),
    _row(
        "fit success. schedule by NetworkID",
        [
            net("dev-0", 0, totalmem=128),
            net("dev-1", 1, totalmem=128),
            net("dev-2", 1, totalmem=128),
        ],
        _r(2, 64, 0, 50),
        True,
        2,
        ids=("dev-2", "dev-1"),
    ),
    _row(
        "fit fail: hami-core pod on legacy node (ModeNotFit)",
        [dev("dev-0", totalmem=32768)],
        _r(1, 15360, 0, 20),
        False,
        reason="1/1 ModeNotFit",
        annotations={MODE_ANNOTATION: HAMI_CORE},
        node_annotations={},
    ),
    _row(
        "fit ok: annotation-less pod on hami-core node follows node",
        [dev("dev-0", totalmem=32768)],
        _r(1, 8738, 0, 0),
        True,
        1,
        ids=("dev-0",),
        node_annotations={NODE_CORE_ANNOTATION: "true"},
    ),
    _row(
        "fit fail: whole-card hami-core pod on legacy node (ModeNotFit)",
        [dev("dev-0", totalmem=32768)],
        _r(1, 32768, 0, 0),
        False,
        reason="1/1 ModeNotFit",
        annotations={MODE_ANNOTATION: HAMI_CORE},
        node_annotations={},
    ),
    _row(
        "fit fail: memory-less hami-core pod on legacy node (ModeNotFit)",
        [dev("dev-0", totalmem=32768)],
        _r(1, 0, 101, 0),
        False,
        reason="1/1 ModeNotFit",
        annotations={MODE_ANNOTATION: HAMI_CORE},
        node_annotations={},
    ),
    _row(
        "fit success: whole-card hami-core pod on hami-core node",
        [dev("dev-0", totalmem=32768)],
        _r(1, 32768, 0, 0),
        True,
        1,
        ids=("dev-0",),
        annotations={MODE_ANNOTATION: HAMI_CORE},
        node_annotations={NODE_CORE_ANNOTATION: "true"},
    ),
    _row(
        "fit success: whole-card legacy pod on hami-core node",
        [dev("dev-0", totalmem=32768)],
        _r(1, 32768, 0, 0),
        True,
        1,
        ids=("dev-0",),
        node_annotations={NODE_CORE_ANNOTATION: "true"},
    ),
    _row(
        "mutex policy rejects used device",
        [dev("dev-0", used=1, totalmem=128)],
        _r(1, 64, 0, 50),
        False,
        reason="1/1 ExclusiveDeviceAllocateConflict",
        annotations=MUTEX,
    ),
    _row(
        "fit fail: CardNotHealth",
        [dev("dev-0", totalmem=1280, health=False)],
        _r(1, 512, 0, 50),
        False,
        reason="1/1 CardNotHealth",
    ),
    _row(
        "fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards",
        [dev("dev-0", totalmem=1280), dev("dev-1", index=1, totalmem=1280)],
        _r(3, 512, 0, 20),
        False,
        reason="2/2 AllocatedCardsInsufficientRequest",
    ),
)

REGISTERED_NETWORKS = {"dev-0": 0, "dev-1": 1, "dev-2": 1}
"""The NetworkID of each device on TestDevices_Fit's node (its NodeInfo.Devices)."""


def rows_for(common_word: str) -> list[FitCase]:
    """TestDevices_Fit's rows as HAMi's loop adapts them to one chip."""
    cases = []
    for row in FIT_ROWS:
        case = row.case
        request = case.request if row.keep_type else replace(case.request, type=common_word)
        annotations = dict(case.annotations)
        if row.uuid_key:
            annotations[f"hami.io/{row.uuid_key}-{common_word}-uuid"] = "dev-0"
        devices = tuple(replace(d, type=common_word) for d in case.devices)
        cases.append(replace(case, devices=devices, request=request, annotations=annotations))
    return cases


def node_annotations_of(name: str) -> Mapping[str, str] | None:
    return next(row.node_annotations for row in FIT_ROWS if row.case.name == name)


def _pair(id: str, index: int, network: int | None = 0) -> HamiDevice:
    info = {} if network is None else {"NetworkID": float(network)}
    return HamiDevice(
        id=id, index=index, count=1, totalmem=32000, type="Ascend910C", custom_info=info
    )


@dataclass(frozen=True, slots=True)
class PairingCase:
    """A 910C pairing test: candidate devices (as registered, same NetworkIDs) and a count."""

    name: str
    devices: tuple[HamiDevice, ...]
    nums: int
    fit: bool
    held: int = 0
    reason_contains: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


FIT_910C_SUPERPOD = FitCase(
    "fit success: Ascend910C topology-aware allocation (full modules only)",
    (
        net("dev-0", 0, index=0, totalmem=128, type="Ascend910C"),
        net("dev-1", 0, index=1, totalmem=128, type="Ascend910C"),
        net("dev-2", 0, index=2, totalmem=128, type="Ascend910C"),
    ),
    HamiRequest(nums=2, type="Ascend910C", memreq=128, coresreq=100),
    True,
    2,
    ids=("dev-1", "dev-0"),
)
"""TestDevices_Fit_910C: NPUs 0 and 1 form module 0, NPU 2 is half of module 1."""

PAIRING_CASES: tuple[PairingCase, ...] = (
    PairingCase(
        "TestAscend910C_FitPartialAllocationBug",
        (
            _pair("dev-0", 0),
            _pair("dev-1", 1),
            _pair("dev-2", 2),
            _pair("dev-4", 4),
            _pair("dev-6", 6),
        ),
        4,
        False,
        reason_contains="AllocatedCardsInsufficientRequest",
    ),
    PairingCase(
        "TestAscend910C_FitExactCountBypassBug",
        (_pair("dev-0", 0), _pair("dev-2", 2)),
        2,
        False,
        reason_contains="AllocatedCardsInsufficientRequest",
    ),
    PairingCase(
        "TestAscend910C_FitFullPairSucceeds",
        (_pair("dev-0", 0), _pair("dev-1", 1)),
        2,
        True,
        2,
    ),
    PairingCase(
        "TestAscend910C_FitWithoutNetworkID_ValidatesPairing (different modules)",
        (_pair("dev-0", 0, None), _pair("dev-2", 2, None)),
        2,
        False,
    ),
    PairingCase(
        "TestAscend910C_FitWithoutNetworkID_ValidatesPairing (one module)",
        (_pair("dev-0", 0, None), _pair("dev-1", 1, None)),
        2,
        True,
        2,
    ),
    PairingCase(
        "TestComputeBestCombination910C_NoFullPairsReturnsEmpty",
        (
            _pair("dev-0", 0, None),
            _pair("dev-2", 2, None),
            _pair("dev-4", 4, None),
            _pair("dev-6", 6, None),
        ),
        4,
        False,
    ),
)
