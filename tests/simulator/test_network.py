"""Links as shared resources (simulator.network): concurrent flows share a link max-min
fairly, flows on disjoint links do not slow each other, and a flow alone takes its time."""

import pytest
import simpy

from simulator.network import Network, max_min_rates


def run_flows(flows):
    """Start each (start_s, uses, work_s) flow; return each one's end time."""
    env = simpy.Environment()
    net = Network(env)
    ends = [None] * len(flows)

    def flow(i, start, uses, work):
        yield env.timeout(start)
        yield from net.transfer(uses, work)
        ends[i] = env.now

    for i, (start, uses, work) in enumerate(flows):
        env.process(flow(i, start, uses, work))
    env.run()
    assert not net.flows_on, "finished flows must leave their links"
    return ends


def test_a_flow_alone_takes_its_time_exactly():
    assert run_flows([(0.25, {"nvlink0": 1.0}, 0.1)]) == [0.25 + 0.1]


def test_disjoint_links_do_not_slow_each_other():
    assert run_flows([(0, {"nvlink0": 1.0}, 2.0), (0, {"nvlink1": 1.0}, 3.0)]) == [2.0, 3.0]


def test_a_shared_link_is_shared_max_min():
    # two flows on one link: half the rate each until the shorter ends, then full speed
    ends = run_flows([(0, {"nic": 1.0}, 2.0), (0, {"nic": 1.0}, 3.0)])
    assert ends == pytest.approx([4.0, 5.0])


def test_a_flow_capped_elsewhere_leaves_the_rest_to_the_other():
    # A uses a quarter of the NIC at full speed and all of its own NVLink; B all of the
    # NIC: max-min gives both the level 1/1.25 = 0.8 at which the NIC fills
    assert max_min_rates([{"nic": 0.25, "nvlink0": 1.0}, {"nic": 1.0}]) == pytest.approx(
        [0.8, 0.8])
    # C is limited to 0.5 by a link it shares with D: B gets the rest of the NIC
    rates = max_min_rates([{"x": 1.0}, {"x": 1.0, "nic": 1.0}, {"nic": 1.0}])
    assert rates == pytest.approx([0.5, 0.5, 0.5])
    rates = max_min_rates([{"x": 1.0}, {"x": 1.0, "nic": 0.5}, {"nic": 1.0}])
    assert rates == pytest.approx([0.5, 0.5, 0.75])


def test_a_late_flow_slows_a_running_one_from_when_it_starts():
    ends = run_flows([(0, {"l": 1.0}, 2.0), (1.0, {"l": 1.0}, 0.5)])
    # first runs alone 1 s (1 s left), then both at 0.5: the second ends at 2.0, the first
    # has 0.5 left then and ends at 2.5
    assert ends == pytest.approx([2.5, 2.0])
