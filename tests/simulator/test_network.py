"""Links as shared resources (simulator.network): concurrent flows share a link max-min
fairly, flows on disjoint links do not slow each other, and a flow alone takes its time."""

import pytest
import simpy

from simulator.network import Network, Route, max_min_rates

GB = 1e9


def route(bandwidth, **links):
    """A route at `bandwidth` GB/s over links given as name=(weight, capacity GB/s)."""
    return Route({k: (w, c * GB) for k, (w, c) in links.items()}, bandwidth * GB)


def run_flows(flows):
    """Start each (start_s, route, work_s) flow; return each one's end time."""
    env = simpy.Environment()
    net = Network(env)
    ends = [None] * len(flows)

    def flow(i, start, r, work):
        yield env.timeout(start)
        yield from net.transfer(r, work)
        ends[i] = env.now

    for i, (start, r, work) in enumerate(flows):
        env.process(flow(i, start, r, work))
    env.run()
    assert not net.flows_on, "finished flows must leave their links"
    return ends


def test_a_flow_alone_takes_its_time_exactly():
    assert run_flows([(0.25, route(450, nvlink0=(1, 450)), 0.1)]) == [0.25 + 0.1]
    # at its NIC's full capacity too (a rank's part of its ring's node traffic)
    assert run_flows([(0, route(400, nvlink0=(1, 450), nic0=(1 / 8, 50)), 0.3)]) == [0.3]


def test_disjoint_links_do_not_slow_each_other():
    ends = run_flows([(0, route(450, nvlink0=(1, 450)), 2.0),
                      (0, route(450, nvlink1=(1, 450)), 3.0)])
    assert ends == [2.0, 3.0]


def test_a_shared_link_is_shared_max_min():
    # two flows on one link: half the rate each until the shorter ends, then full speed
    ends = run_flows([(0, route(50, nic=(1, 50)), 2.0), (0, route(50, nic=(1, 50)), 3.0)])
    assert ends == pytest.approx([4.0, 5.0])


def test_a_flow_capped_elsewhere_leaves_the_rest_to_the_other():
    # tensor-parallel traffic (NVLink, 450 GB/s) beside a data-parallel ring capped by its
    # NIC at 50 GB/s: the ring keeps its 50, the other gets the 400 left (max-min)
    tp = ({"nvlink": 1.0}, 450 * GB)
    dp = ({"nvlink": 1.0, "nic": 1.0}, 50 * GB)
    cap = {"nvlink": 450 * GB, "nic": 50 * GB}
    assert max_min_rates([tp, dp], cap) == pytest.approx([400 / 450, 1.0])
    # three equal flows on one link: a third each
    assert max_min_rates([tp, tp, tp], cap) == pytest.approx([1 / 3] * 3)


def test_a_late_flow_slows_a_running_one_from_when_it_starts():
    r = route(10, link=(1, 10))
    ends = run_flows([(0, r, 2.0), (1.0, r, 0.5)])
    # first runs alone 1 s (1 s left), then both at half: the second ends at 2.0, the first
    # has 0.5 left then and ends at 2.5
    assert ends == pytest.approx([2.5, 2.0])


# ---------------------------------------------------------------- at scale (design note 103)


def run_counted(flows, monkeypatch):
    """run_flows on a counting environment; (ends, alone flags, SimPy events, solver calls)."""
    import simulator.network as network
    from simulator.resources import Environment

    calls = [0]
    solver = network.max_min_rates

    def counted(*args):
        calls[0] += 1
        return solver(*args)

    monkeypatch.setattr(network, "max_min_rates", counted)
    env = Environment()
    net = Network(env)
    ends, alone = [None] * len(flows), [None] * len(flows)

    def flow(i, start, r, work):
        yield env.timeout(start)
        alone[i] = yield from net.transfer(r, work)
        ends[i] = env.now

    for i, (start, r, work) in enumerate(flows):
        env.process(flow(i, start, r, work))
    env.run()
    assert not net.flows_on and not net.load, "finished flows must leave their links"
    return ends, alone, env.events, calls[0]


def leaf(n, uplink_GBps):
    """n GPUs' flows at 45 GB/s, each on its own NVLink and NIC and all on one uplink."""
    return [route(45, **{f"nvlink{i}": (1, 450), f"nic{i}": (1 / 8, 50),
                         "uplink": (1 / 8 / n, uplink_GBps)}) for i in range(n)]


def test_flows_with_room_on_their_links_run_without_the_solver(monkeypatch):
    # a 32-node leaf's ranks on their uplink, every flow at its bandwidth: no progressive
    # filling at any start or end (before: one over the whole leaf at each), and each
    # flow's one scheduled end stands (before, each end rescheduled a neighbour)
    n = 32
    ends, alone, events, calls = run_counted([(0.0, r, 1.0) for r in leaf(n, 1600)],
                                             monkeypatch)
    assert ends == [1.0] * n and all(alone) and calls == 0
    # per flow: its process's start and end, its timeout, its end timer, its done
    assert events <= 5 * n + 1


def test_a_flow_without_room_pays_for_the_solver_and_is_slowed(monkeypatch):
    # the same flows on an uplink of half the bandwidth they need: all at half rate
    n = 32
    need = n * 45 / 8 / n  # GB/s the flows put on the uplink at their bandwidth
    ends, alone, _, calls = run_counted([(0.0, r, 1.0) for r in leaf(n, need / 2)],
                                        monkeypatch)
    assert calls > 0 and not any(alone)
    assert ends == pytest.approx([2.0] * n)


def test_an_ending_flow_speeds_up_only_the_flows_it_held_back(monkeypatch):
    # a and b share link x (each half of it); c runs alone on y: when a ends, b speeds up
    # (the solver runs for b's component) and c is untouched and reports running alone
    a = route(10, x=(1, 10))
    c = route(10, y=(1, 10))
    ends, alone, _, calls = run_counted([(0.0, a, 1.0), (0.0, a, 2.0), (0.0, c, 3.0)],
                                        monkeypatch)
    assert ends == pytest.approx([2.0, 3.0, 3.0])
    assert alone == [False, False, True] and calls == 2  # b's start, a's end
