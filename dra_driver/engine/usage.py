"""What a placed pod holds on each device, init containers at their peak.

HAMi's CollapseInitContainerUsage: per device, memory and cores are the
larger of the biggest init container and the sum of the app containers;
slots are the app containers' count, at least 1 when an init container used it;
tags are the app containers' grants' tags, or the first init container's.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.engine.grants import ContainerGrants
from dra_driver.engine.model import DeviceUsage


def collapse_pod_usage(
    containers: Sequence[ContainerGrants], init_count: int
) -> dict[str, DeviceUsage]:
    init_peak: dict[str, tuple[int, int]] = {}
    init_tags: dict[str, tuple[str, ...]] = {}
    app_sum: dict[str, DeviceUsage] = {}
    for position, container in enumerate(containers):
        for grant in container:
            if position < init_count:
                memory, cores = init_peak.get(grant.uuid, (0, 0))
                init_peak[grant.uuid] = (max(memory, grant.memory_mib), max(cores, grant.cores))
                if grant.tag:
                    init_tags.setdefault(grant.uuid, (grant.tag,))
            else:
                previous = app_sum.get(grant.uuid, DeviceUsage())
                tags = (grant.tag,) if grant.tag else ()
                app_sum[grant.uuid] = previous.plus(
                    DeviceUsage(1, grant.memory_mib, grant.cores, tags)
                )
    result: dict[str, DeviceUsage] = {}
    for device_id in dict.fromkeys([*init_peak, *app_sum]):
        app = app_sum.get(device_id, DeviceUsage())
        peak_memory, peak_cores = init_peak.get(device_id, (0, 0))
        result[device_id] = DeviceUsage(
            used=max(app.used, 1 if device_id in init_peak else 0),
            memory_mib=max(app.memory_mib, peak_memory),
            cores=max(app.cores, peak_cores),
            tags=app.tags or init_tags.get(device_id, ()),
        )
    return result
