"""Every timed run sees the inputs as uploaded: the executor copies back each input buffer
the program writes (an AllReduce reduced in place into its dead input, an Update's target)
before every warm-up and timed run, outside the timed region (GPU run 18: without it, an
in-place AllReduce on 2 ranks doubled Adam's gradients every run until the update divided
Inf and NaN, and w1 took 1.65 ms instead of 1.07). CPU only: the CUDA driver is faked and
logs what is enqueued, in order."""

from codegen.lower import lower
from workbench.interpreter import random_inputs
from workbench.loader import load
from workbench.runtime.executor import PlanRun

SIZES = {"N": 1024, "P": 1}


class _Alloc(int):
    def free(self):
        pass


class _Drv:
    """A driver that hands out addresses and logs copies, events and launches in order."""

    def __init__(self, log):
        self.log, self.next = log, 1 << 20
        self.Context = type("Ctx", (), {"synchronize": staticmethod(
            lambda: log.append(("sync",)))})

    def mem_alloc(self, nbytes):
        a = _Alloc(self.next)
        self.next += -(-nbytes // 256) * 256
        return a

    def memset_d32(self, *a):
        pass

    def memcpy_htod(self, ptr, arr):
        self.log.append(("htod", int(ptr), arr.nbytes))

    def memcpy_dtod(self, dst, src, nbytes):
        self.log.append(("dtod", int(dst), int(src), nbytes))

    def memcpy_dtod_async(self, dst, src, nbytes, stream=None):
        self.log.append(("restore", int(dst), int(src), nbytes))

    def Event(self):
        log = self.log

        class Event:
            def record(self, stream=None):
                log.append(("event",))

            def synchronize(self):
                pass

            def time_till(self, other):
                return 1.0

        return Event()


class _Fn:
    def __init__(self, log):
        self.log = log

    def prepare(self, sig):
        pass

    def prepared_async_call(self, *a):
        self.log.append(("kernel",))


class _Gpu:
    rank, world, sm_count = 0, 1, 4

    def __init__(self):
        self.log = []
        self.drv = _Drv(self.log)

    def all_gather(self, obj):
        return [obj]

    def function(self, name, source):
        return _Fn(self.log)

    def collective(self, op, *a, **k):
        self.log.append(("nccl", op))


def _run(spec, schedule=None):
    pf = load(spec)
    program = pf.schedules[schedule].apply() if schedule else pf.program
    gpu = _Gpu()
    run = PlanRun(gpu, lower(program, 1), SIZES)
    run.upload(random_inputs(pf.program, SIZES))
    return run, gpu.log


def test_clobbered_inputs_are_the_in_place_allreduce_and_the_update_targets():
    run, _ = _run("studies/adam.py")
    assert run.clobbered_inputs() == ["g", "m", "v", "w"]
    run, _ = _run("studies/elementwise_ops.py:lamb_u")  # u is a new tensor
    assert run.clobbered_inputs() == []


def test_upload_keeps_a_device_copy_of_each_clobbered_input():
    run, log = _run("studies/adam.py")
    copies = [e for e in log if e[0] == "dtod"]
    assert sorted(dst for _, dst, _, _ in copies) == sorted(int(p) for p in run.pristine.values())
    assert {src for _, _, src, _ in copies} == {run.ptr[b] for b in ("g", "m", "v", "w")}
    assert all(n == 1024 * 4 for *_, n in copies)
    # the copies come after the uploads, so they hold the uploaded values
    assert max(i for i, e in enumerate(log) if e[0] == "htod") < log.index(copies[0])


def test_every_run_starts_from_the_uploaded_inputs_outside_the_timed_region():
    run, log = _run("studies/adam.py")
    del log[:]
    run.time(warmup=2, reps=3)
    restores = {(run.ptr[b], int(run.pristine[b]), 1024 * 4) for b in ("g", "m", "v", "w")}
    # each of the 5 runs: the 4 restores; a timed run then waits for them (the GPU idle at
    # its start, as without restores) and records its start event
    runs = [i for i, e in enumerate(log) if e == ("nccl", "all_reduce")]
    assert len(runs) == 5
    for i in runs[:2]:
        assert {e[1:] for e in log[i - 4:i]} == restores
    for i in runs[2:]:
        assert log[i - 2:i] == [("sync",), ("event",)]
        assert {e[1:] for e in log[i - 6:i - 2]} == restores


def test_per_step_runs_restore_too():
    run, log = _run("studies/adam.py")
    del log[:]
    got = run.time_steps(warmup=1, reps=2)
    assert [label for label, _ in got] == ["g1", "m1", "v1", "w1"]
    kinds = [e[0] for e in log]
    assert kinds.count("restore") == 4 * 3
    # the first event of a timed run follows its restores and a synchronize
    first_events = [i for i in range(2, len(log)) if kinds[i] == "event"
                    and kinds[i - 2:i] == ["restore", "sync"]]
    assert len(first_events) == 2



# -- the baselines (torch): the same rule


class _Tensor:
    """Enough of a torch tensor for baselines.restorer: clone and copy_."""

    def __init__(self, values):
        self.values = list(values)

    def clone(self):
        return _Tensor(self.values)

    def copy_(self, other):
        self.values = list(other.values)


def _fake_torch(log):
    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            log.append("event")

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    cuda = type("cuda", (), {"Event": Event,
                             "synchronize": staticmethod(lambda: log.append("sync"))})
    return type("torch", (), {"cuda": cuda})


def test_baselines_sum_the_same_gradients_every_repetition():
    from workbench.runtime.baselines import event_times, restorer

    log, g = [], _Tensor([1.0, -2.0])
    seen = []

    def all_reduce_in_place():  # what dist.all_reduce(g) does on 2 ranks holding equal g
        seen.append(list(g.values))
        g.values = [2 * x for x in g.values]
        log.append("run")

    times = event_times(_fake_torch(log), all_reduce_in_place, 2, 3, restorer(g))
    assert times == [1.0] * 3
    assert seen == [[1.0, -2.0]] * 5  # never 2x, 4x, ...: each run starts from the same g
    # timed repetitions: restored and waited for before the start event, then the run
    assert log[3:] == ["sync", "event", "run", "event"] * 3
