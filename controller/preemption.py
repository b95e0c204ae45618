"""Which pods a pending pod preempts, and on which node, decided as kube-scheduler decides. Pure.

kube-scheduler cannot preempt for a GPU share: its DynamicResources plugin has
no PreFilterExtensions, so its dry run never sees the capacity a victim would
free (kubernetes-dra.md §10). The controller decides every share itself, so it
runs kube-scheduler's DefaultPreemption over its own view instead, with HAMi's
full rules as the only filter:

- Per node (`SelectVictimsOnNode`): every holder of strictly lower priority is
  removed; if the pod does not fit then, the node is no candidate. Otherwise
  the removed pods are given back most important first (priority, then start
  time), those whose eviction would violate a PodDisruptionBudget before the
  rest, each one kept when the pod still fits with it back; the others are the
  victims, and `pdb_violations` counts the violating ones among them.
- Nodes are tried from `offset` in the caller's order until kube-scheduler's
  number of candidates is found (10 % of the nodes, at least 100; the search
  stops early only once a candidate violates no budget), and one is picked by
  `pickOneNodeForPreemption`'s rules, each breaking the previous one's ties.

"Fits" is `decide_pod` on the node alone, with the engine's usage there minus
the shares the removed pods free: the same variants, request policies,
constraints, filters, NUMA and quota as an allocation, so the pod is never
preempted for where it would then be refused. A share (one claim's allocation,
or a legacy pod's hold) frees only when every pod reserving it is removed, so
a claim shared with a pod that stays, or with a pod this view does not know,
frees nothing. Giving back a pod that frees nothing is kept without a fit.

MIG partitions (controller/partitions.py) are part of the share of the claim
that holds them and free by the same rule. A trial of a pod that asks for a
partition gives `decide_pod` the node's counter usage less what the freed
shares' partitions consume (a given-back pod's count again), and the quota
they were charged (`controller.partition_quota`) is given back with them: the
pod fits a trial iff HAMi's placement rules and its quota would place it with
those pods gone. A pod that asks for no partition is never helped by a
partition's counters (a card is either shared or partitioned), so a holder
whose shares on the node hold only partitions is no candidate there, unless
freeing them gives back quota the pod's namespace is held to, or the node is
one of `Holdings.rooms` (its going frees room).

One shortcut keeps the reprieve loop cheap without changing an answer
(`_NodeTrial.keeps_fit`): HAMi's standard Fit walks the devices in policy order
and takes the first that can host each request, judging each device by its own
usage alone. So when a given-back pod's shares lie only on devices the last
fit's placement does not use, and leave each of them unable to host any of the
pod's requests (the engine's `could_fit` headroom test fails), the engine would
take the same placement again and is not asked. Under the spread order (least
used first, HAMi's default) that holds even when they could host: such a device
was walked after the placement (or could not host it then) and its added usage
only moves it further back. Where a device's place in the
walk matters beyond that (NUMA binding, the topology-aware policy, a vendor
with its own Fit or slot charge) or the namespace quota the pod is charged to
changes, or the pod asks for a partition and the given-back pod holds one, the
engine is asked. A given-back pod is a victim without asking the
engine when its usage leaves some request of every variant too few devices with a
free slot, its memory and its cores (`lacks_headroom` in preemption_headroom.py,
the engine's own pruning test, which a partition never helps to pass): the
engine would refuse, and only a first fit's reason is ever reported.

For most pods no engine is needed to say yes (`preemption_counting`): with one
variant, one container asking for one device request and nothing in
`decide_pod` that can refuse a placed device, the pod fits iff enough devices
pass HAMi's per-device checks, so a trial keeps that count and a give-back
re-judges only the devices it touches. The engine is asked only for a refusal's
reason, and for the pods and nodes counting does not cover.

Node predicates: the caller passes the nodes that pass them as they stand, and
those that would pass only with pods bound there removed (`Holdings.rooms`: too
many pods, too little cpu or memory). On the latter, as kube-scheduler runs
every filter in its dry run, the pod must also fit NodeResourcesFit with all
lower-priority holders gone, and a holder whose return leaves too little room
is a victim even if its share frees nothing the GPU needs.

What is not here: capacity held for nominated pods, and every write (`nominatedNodeName`, the
DisruptionTarget condition, the deletion, events).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from types import MappingProxyType

from controller.decide import NoFit, decide_pod
from controller.inventory import Inventory
from controller.partition_inventory import CounterUsage
from controller.preemption_counting import PassingDevices, counted_request, untagged
from controller.preemption_headroom import could_host, headroom_needs, lacks_headroom, walked_alone
from controller.preemption_shares import (
    Share,
    charges_quota,
    counters_without,
    quota_without,
    usage_without,
)
from controller.requests import PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DeviceRequest
from dra_driver.objects.node_predicates import NodeRoom

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
MIN_CANDIDATE_NODES_PERCENTAGE = 10
"""DefaultPreemptionArgs' defaults: how many candidate nodes the dry run looks for."""
MIN_CANDIDATE_NODES_ABSOLUTE = 100
MAX_INT32 = 2**31 - 1
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
EMPTY_REQUESTS: Mapping[str, Decimal] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod that reserves shares: what victim selection and node choice read of it."""

    uid: str
    name: str
    """namespace/name, for the events that name it."""
    priority: int
    started: float
    """status.startTime in seconds; a pod not started yet counts as starting now
    (kube-scheduler's GetPodStartTime), which the caller fills in."""


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the dry run reads it."""

    allowed: int
    """status.disruptionsAllowed."""
    pods: frozenset[str]
    """uids of the pods its selector matches in its namespace, less its disruptedPods."""


@dataclass(frozen=True, slots=True)
class Holdings:
    """Who holds what: the pods, their shares, and the budgets that protect them."""

    pods: Mapping[str, Holder]
    shares: Sequence[Share]
    budgets: Sequence[DisruptionBudget] = ()
    rooms: Mapping[str, NodeRoom] = field(default_factory=dict)
    """The nodes that pass the pod's node predicates only once pods bound there are
    removed (pods, cpu, memory), with what NodeResourcesFit reads of each; every
    other node in the plan passes them as it stands."""


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The pending pod: its priority, its preemptionPolicy and its engine variants."""

    priority: int
    variants: Sequence[PodVariant]
    policy: str = PREEMPT_LOWER_PRIORITY
    requests: Mapping[str, Decimal] = field(default_factory=dict)
    """Its effective resource requests, judged against `Holdings.rooms`."""


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """A candidate: the node, its victims most important first, and the shares they free."""

    node: str
    victims: tuple[Holder, ...]
    pdb_violations: int
    freed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """Why nothing is preempted, in kube-scheduler's words."""

    message: str


def plan_preemption(
    preemptor: Preemptor,
    engine: Engine,
    inventory: Inventory,
    nodes: Sequence[str],
    holdings: Holdings,
    offset: int = 0,
    partitions: CounterUsage | None = None,
) -> NodeVictims | NoPreemption:
    """The node and victims kube-scheduler's DefaultPreemption would choose.

    `engine` is the controller's, read only (its usage, settings, vendors and
    quota); `nodes` pass the pod's node predicates, in the order to try them
    from `offset` (kube-scheduler starts at a random one). `partitions` is what
    the allocated MIG partitions hold, read only (as for `decide_pod`: without
    it a variant asking for a partition fits nowhere).
    """
    if preemptor.policy == PREEMPT_NEVER:
        return NoPreemption(NOT_ELIGIBLE_NEVER)
    potential = [name for name in nodes if name in inventory.nodes]
    if not potential:
        return NoPreemption(NOT_HELPFUL)
    wanted = candidates_wanted(len(nodes))
    by_node: defaultdict[str, list[Share]] = defaultdict(list)
    for share in holdings.shares:
        by_node[share.node].append(share)
    scratch = _Scratch(preemptor, engine, inventory, partitions)
    clean: list[NodeVictims] = []
    violating: list[NodeVictims] = []
    statuses: dict[str, int] = {}
    for step in range(len(potential)):
        name = potential[(offset + step) % len(potential)]
        trial = _NodeTrial(scratch, engine, name)
        shares = by_node.get(name, [])
        if not scratch.asks_partitions and name not in holdings.rooms:
            # A share holding only partitions frees nothing a share can use (module docstring).
            shares = [
                share
                for share in shares
                if share.usage
                or not share.partitions
                or charges_quota((share,), scratch.quota, scratch.namespace)
            ]
        found = select_victims(trial, preemptor.priority, shares, holdings, preemptor.requests)
        if isinstance(found, str):
            statuses[found] = statuses.get(found, 0) + 1
            continue
        (violating if found.pdb_violations else clean).append(found)
        if clean and len(clean) + len(violating) >= wanted:
            break
    candidates = clean + violating
    if not candidates:
        counts = ", ".join(f"{count} {reason}" for reason, count in sorted(statuses.items()))
        return NoPreemption(f"0/{len(nodes)} nodes are available: {counts}.")
    return pick_node(candidates)


def candidates_wanted(nodes: int) -> int:
    """kube-scheduler's calculateNumCandidates with the default arguments."""
    wanted = max(nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE)
    return min(wanted, nodes)


def select_victims(
    trial: _NodeTrial,
    priority: int,
    shares: Sequence[Share],
    holdings: Holdings,
    requested: Mapping[str, Decimal] = EMPTY_REQUESTS,
) -> NodeVictims | str:
    """SelectVictimsOnNode over one node's shares, or the node's status when it is no
    candidate (no lower-priority holder, or no fit even with all of them gone). On a
    node of `holdings.rooms` a pod given back must also leave room for `requested`
    (the pod's own requests), as every filter is run again on a reprieve."""
    shares_of: dict[str, list[int]] = {}
    for index, share in enumerate(shares):
        for uid in share.holders:
            held = shares_of.get(uid)
            if held is None:
                shares_of[uid] = [index]
            else:
                held.append(index)
    pods = holdings.pods
    lower = [
        pod for uid in shares_of if (pod := pods.get(uid)) is not None and pod.priority < priority
    ]
    if not lower:
        return NO_VICTIMS
    removed = {pod.uid for pod in lower}
    room = holdings.rooms.get(trial.node)
    if room is not None and (short := room.refusal_without(requested, removed)) is not None:
        return short
    freed = {i for i, share in enumerate(shares) if share.holders <= removed}
    refusal = trial.refusal([shares[i] for i in freed])
    if refusal is not None:
        return refusal
    ordered = sorted(lower, key=_importance)
    violating, others = split_by_budgets(ordered, holdings.budgets)
    victims: list[Holder] = []
    violations = 0
    for group, violates in ((violating, 1), (others, 0)):
        for pod in group:
            back = [i for i in shares_of[pod.uid] if i in freed]
            if room is not None:
                removed.discard(pod.uid)
            if (room is not None and room.refusal_without(requested, removed) is not None) or (
                back
                and not trial.fits_with_back(
                    [shares[i] for i in back], (shares[i] for i in freed if i not in back)
                )
            ):
                removed.add(pod.uid)
                victims.append(pod)
                violations += violates
                continue
            freed.difference_update(back)
    if violating and others:
        victims.sort(key=_importance)
    if not victims:
        return NO_VICTIMS
    keys = tuple(shares[i].key for i in sorted(freed))
    return NodeVictims(trial.node, tuple(victims), violations, keys)


def split_by_budgets(
    ordered: Sequence[Holder], budgets: Sequence[DisruptionBudget]
) -> tuple[list[Holder], list[Holder]]:
    """filterPodsWithPDBViolation: walking the pods in order, each takes one disruption
    from every budget covering it; a pod that takes one a budget no longer has violates."""
    allowed = [budget.allowed for budget in budgets]
    violating: list[Holder] = []
    others: list[Holder] = []
    for pod in ordered:
        violated = False
        for index, budget in enumerate(budgets):
            if pod.uid in budget.pods:
                allowed[index] -= 1
                violated = violated or allowed[index] < 0
        (violating if violated else others).append(pod)
    return violating, others


def pick_node(candidates: Sequence[NodeVictims]) -> NodeVictims:
    """pickOneNodeForPreemption: each rule keeps the best-scoring candidates; the first
    of the last ones left wins."""
    rules = (
        lambda c: -c.pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(victim.priority + MAX_INT32 + 1 for victim in c.victims),
        lambda c: -len(c.victims),
        _earliest_start,
    )
    remaining = list(candidates)
    for rule in rules:
        best = max(rule(candidate) for candidate in remaining)
        remaining = [candidate for candidate in remaining if rule(candidate) == best]
        if len(remaining) == 1:
            break
    return remaining[0]


def _earliest_start(candidate: NodeVictims) -> float:
    """GetEarliestPodStartTime: the earliest start among the most important victims."""
    top = candidate.victims[0].priority
    return min(victim.started for victim in candidate.victims if victim.priority == top)


def _importance(pod: Holder) -> tuple[int, float]:
    """MoreImportantPod first: higher priority, then the earlier start."""
    return -pod.priority, pod.started


class _Scratch:
    """What the trials of one plan share: one engine whose only node is the one being
    tried (swapped in per trial rather than an engine built per node), the pod, and
    what each of its variants lets a trial skip."""

    def __init__(
        self,
        preemptor: Preemptor,
        engine: Engine,
        inventory: Inventory,
        partitions: CounterUsage | None,
    ) -> None:
        self.variants = preemptor.variants
        self.inventory = inventory
        self.quota = engine.quota
        self.namespace = preemptor.variants[0].request.namespace if preemptor.variants else ""
        self.asks_partitions = any(c.partitions for v in self.variants for c in v.claims)
        """Some variant asks for a MIG partition: the trials then count the partitions."""
        self._partitions = partitions
        self.engine = Engine(
            (),
            # Each state is judged once: there is nothing to remember refusals for.
            settings=replace(engine.settings, reason_cache_shapes=0),
            vendors=engine.vendors,
            quota=engine.quota,
        )
        self._node: str | None = None
        self._walks: list[tuple[PodVariant, tuple[DeviceRequest, ...] | None, bool]] = []
        self.needs = tuple(headroom_needs(variant, engine.vendors) for variant in self.variants)
        """Per variant, the requests the engine's headroom test counts devices for (None
        when one names a vendor the registry lacks: the engine must say why)."""
        self.counted = counted_request(
            self.variants, engine.vendors, engine.settings.gpu_policy, engine.quota
        )
        """The pod's request when a fit can be counted device by device, else None."""

    def node_counters(self, node: str) -> CounterUsage | None:
        """What the allocated partitions hold on the node's MIG cards, for a pod that asks
        for a partition (None otherwise, or when the caller gave no counters)."""
        if not self.asks_partitions or self._partitions is None:
            return None
        used = self._partitions.used
        cards = self.inventory.partition_cards.get(node) or {}
        return CounterUsage({card: dict(used.get(card) or {}) for card in cards})

    def take(self, node: Node) -> None:
        """Make `node`, idle, the scratch engine's only node."""
        if self._node is not None:
            self.engine.remove_node(self._node)
        self.engine.set_node(node)
        self._node = node.name

    def walk_of(self, variant: PodVariant) -> tuple[tuple[DeviceRequest, ...] | None, bool]:
        """For a fit of `variant`: the requests the shortcut may judge a give-back by
        (None when it may not), and whether the walk goes least used first (HAMi's plain
        spread order). Worked out once per variant, when it first fits."""
        for known, hosted, spread in self._walks:
            if known is variant:
                return hosted, spread
        pod = variant.request
        policy = parse_gpu_policy(pod.gpu_policy or self.engine.settings.gpu_policy)
        weights = pod.weights
        spread = (
            policy.chain is None
            and not policy.binpack
            and not policy.mutex_sort
            and min(weights.slot, weights.core, weights.memory) >= 0
        )
        hosted = walked_alone(pod, policy, self.engine.vendors)
        self._walks.append((variant, hosted, spread))
        return hosted, spread


class _NodeTrial:
    """Whether the preemptor fits on one node with some shares freed: the scratch
    engine over that node alone, given the controller engine's usage there minus
    those shares."""

    def __init__(self, scratch: _Scratch, engine: Engine, node: str) -> None:
        state = engine.node_state(node)
        self.node = node
        self._scratch = scratch
        self._usage = {
            slot.device.id: DeviceUsage(slot.used, slot.memory, slot.cores, slot.tags)
            for slot in state.slots
        }
        self._fitting = self._usage
        """The usage of the last fit: a dict of this trial's own once a fit is found."""
        self._node_devices = state.node.devices
        self._devices = {device.id: device for device in state.node.devices}
        self._placed: frozenset[str] = frozenset()
        """The devices of the last fit's placement."""
        self._hosted: tuple[DeviceRequest, ...] | None = None
        """The last fit's requests when the shortcut may judge a give-back, else None."""
        self._spread = False
        """The last fit walked its devices least used first (HAMi's plain spread order)."""
        self._counting: PassingDevices | None = None
        """The devices that pass at the last fit's usage, when counting decides."""
        self._counters = scratch.node_counters(node)
        """The node's partition counters before any share is freed, when the pod asks
        for a partition."""
        scratch.take(state.node)
        self._state = state

    def refusal(self, freed: Collection[Share]) -> str | None:
        """None when the pod fits with `freed` released, else the node's reason; a fit
        becomes the usage that `fits_with_back` starts from. A fit that counting
        finds needs no engine, and counting then judges every give-back."""
        usage = usage_without(self._usage, freed)
        counted = self._scratch.counted
        if counted is not None and untagged(usage.values()):
            passing = counted.on_node(self._state, self._scratch.inventory)
            if passing is not None and passing.fits(usage):
                self._fitting = usage
                self._counting = passing
                return None
        return self._judge(usage, freed)

    def fits_with_back(self, back: Collection[Share], freed: Iterable[Share]) -> bool:
        """Whether the pod still fits when the last fit freed `freed` and `back` too
        (`refusal(freed)` is None): only the devices `back` holds are charged again.
        A fit becomes the usage the next give-back starts from. Counting never meets a
        partition: it only judges a pod that asks for none (preemption_counting.py)."""
        fitting = self._fitting
        charged: dict[str, DeviceUsage] = {}
        for share in back:
            for uuid, amount in share.usage.items():
                held = charged.get(uuid, fitting.get(uuid))
                if held is not None:
                    charged[uuid] = held.plus(amount)
        if self._counting is not None:
            if untagged(charged.values()):
                kept = self._counting.fits_with(charged)
                if kept:
                    fitting.update(charged)
                return kept
            self._counting = None
        if self.keeps_fit(back, charged.keys(), charged):
            fitting.update(charged)
            return True
        usage = {**fitting, **charged}
        if self.hopeless(usage):
            return False
        return self._judge(usage, freed) is None

    def keeps_fit(
        self, back: Collection[Share], touched: Collection[str], usage: Mapping[str, DeviceUsage]
    ) -> bool:
        """Whether the last fit's placement is what the engine would take again with
        `back` charged (module docstring): the devices `back` touches are outside it,
        the pod's quota is unchanged and, if it asks for a partition, `back` holds none;
        and either the walk goes least used first (a device outside the placement was
        walked after it or could not host the pod, and only moves further back as its
        usage grows) or the touched devices cannot host any of the pod's requests."""
        hosted = self._hosted
        if hosted is None or not self._placed.isdisjoint(touched):
            return False
        if charges_quota(back, self._scratch.quota, self._scratch.namespace):
            return False
        if self._counters is not None and any(share.partitions for share in back):
            return False
        return self._spread or not any(
            could_host(self._devices[uuid], usage[uuid], request)
            for uuid in touched
            for request in hosted
        )

    def hopeless(self, usage: Mapping[str, DeviceUsage]) -> bool:
        """Whether the engine would refuse the pod at `usage` whatever else it checks
        (`lacks_headroom`): its reason is not needed, only that it refuses."""
        return lacks_headroom(self._node_devices, usage, self._scratch.needs)

    def _judge(self, usage: dict[str, DeviceUsage], freed: Iterable[Share]) -> str | None:
        scratch = self._scratch
        freed = tuple(freed)
        scratch.engine.set_usage(self.node, usage)
        scratch.engine.quota = quota_without(scratch.quota, freed)
        counters = None if self._counters is None else counters_without(self._counters, freed)
        outcome = decide_pod(
            scratch.engine, scratch.variants, scratch.inventory, (self.node,), {}, counters
        )
        if isinstance(outcome, NoFit):
            return outcome.reasons.get(self.node, NO_VICTIMS)
        self._fitting = usage
        self._placed = frozenset(
            grant.uuid for container in outcome.placement.containers for grant in container
        )
        self._hosted, self._spread = scratch.walk_of(outcome.variant)
        return None
