"""The MIG partition naming and counter contract (dra_driver/objects/mig_devices.py)."""

from __future__ import annotations

import itertools

import pytest

from dra_driver.objects.mig_devices import (
    COMPUTE_SLICES,
    MEDIA_EXTENSIONS,
    PartitionName,
    card_counters,
    parse_partition_device_name,
    partition_consumption,
    partition_device_name,
    profile_for_slug,
)
from dra_driver.objects.mig_profiles import CARDS, H100_80GB, MigCard


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_every_placement_name_round_trips_and_is_a_dns_label(card: MigCard) -> None:
    for profile in card.profiles:
        for placement in profile.placements:
            name = partition_device_name(3, profile.name, placement.start)
            assert len(name) <= 63 and name == name.lower()
            parsed = parse_partition_device_name(name)
            assert parsed is not None and parsed.gpu_index == 3
            assert parsed.start == placement.start
            assert profile_for_slug(card, parsed.profile_slug) == profile


def test_other_device_names_are_no_partitions() -> None:
    assert parse_partition_device_name("gpu-0") is None
    assert parse_partition_device_name("gpu-0-mig-1g-10gb") is None
    assert parse_partition_device_name("gpu-1-mig-1g-10gb-me-at-6") == PartitionName(
        1, "1g-10gb-me", 6
    )


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_two_placements_fit_the_counters_together_exactly_when_they_do_not_overlap(
    card: MigCard,
) -> None:
    """Counters are what keeps any allocator from handing out overlapping instances:
    a pair fits the card's counters iff the placements do not overlap (and at most
    one uses the media extensions)."""
    limits = card_counters(card)
    partitions = [
        (profile, placement) for profile in card.profiles for placement in profile.placements
    ]
    for (p1, a), (p2, b) in itertools.combinations(partitions, 2):
        total: dict[str, int] = {}
        for consumed in (partition_consumption(p1, a), partition_consumption(p2, b)):
            for name, amount in consumed.items():
                total[name] = total.get(name, 0) + amount
        fits = all(total[name] <= limits[name] for name in total)
        both_me = p1.media_extensions and p2.media_extensions
        assert fits == (not a.overlaps(b) and not both_me), (p1.name, a, p2.name, b)


def test_a_full_card_consumes_every_counter() -> None:
    full = H100_80GB.profile("7g.80gb")
    assert full is not None
    consumed = partition_consumption(full, full.placements[0])
    limits = card_counters(H100_80GB)
    assert {k: v for k, v in limits.items() if k != MEDIA_EXTENSIONS} == consumed
    assert consumed[COMPUTE_SLICES] == 7
