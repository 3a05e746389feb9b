"""The data-parallel optimizer schedules that SGD, Adam and LAMB share (CoCoNet Fig. 10)."""

from workbench import ir, schedule


def elementwise_runs(program, updates) -> list[list]:
    """The runs of consecutive elementwise statements (Compute, Update) among `updates`, in
    program order: what one fused optimizer kernel (Apex's FusedAdam, torch's fused step)
    computes in one pass. A reduction (LAMB's norms) ends a run."""
    runs, run = [], []
    for u in updates:
        name = getattr(u, "traced_name", None) or u.name  # a DSL handle's traced name
        if isinstance(program.stmt_defining(name).op, ir.ELEMENTWISE_OPS):
            run.append(u)
        else:
            runs, run = runs + ([run] if run else []), []
    return runs + ([run] if run else [])


def optimizer_schedules(program, grad_allreduce, updates, state, gathered,
                        copy_engines: bool = False):
    """The schedules of a data-parallel optimizer step:

    ar-opt                CoCoNet's baseline: NCCL AllReduce, then the whole update as one
                          fused optimizer kernel (Adam: 28 B/element where the unscheduled
                          program's kernel per update reads and writes 40); the kernel runs
                          of an update with norms (LAMB) are one kernel each
    rs-c-ag               split the gradient AllReduce; the whole update on slices; gather
                          every updated tensor
    rs-c-ag-sliced-state  the same, keeping `state` (inputs) sliced: only `gathered` is gathered
                          (left out when there is no state to keep sliced)
    fuse-rs-c-ag          rs-c-ag-sliced-state as one FusedAllReduce kernel
    fuse-rs-c-ag-ring     fuse-rs-c-ag carried by NCCL's ring over the whole group, network
                          included, the update applied per chunk as it arrives: CoCoNet's
                          own fused collective across nodes (transforms.RingFuse), priced
                          and simulated, not generated (no norms: LAMB has none)
    fuse-rs-c-ag-ce       fuse-rs-c-ag with its bytes moved by copy engines, 8 pieces per
                          slice, a kernel computing on each piece as it arrives (only with
                          copy_engines=True: GPU run 16 measured it no faster than the SMs
                          on 2x H200; never for an optimizer with norms, whose fused kernel
                          has a cross-rank step between phases)

    `updates` are the statements that read the reduced gradient (directly or through each
    other), in program order; `gathered` are the outputs every rank still needs whole.
    """

    def ar_opt(s):
        """AllReduce, then the update's elementwise statements fused into one kernel (CoCoNet's
        AR-Opt: NCCL + Apex's FusedAdam)."""
        for run in elementwise_runs(program, updates):
            if len(run) > 1:
                s.fuse(*run)

    ar_opt = schedule(program, "ar-opt")(ar_opt)

    @schedule(program)
    def rs_c_ag(s):
        """ReduceScatter, the whole update on slices, AllGather of every updated tensor."""
        rs, ag = s.split(grad_allreduce)
        s.reorder(*updates, before=ag)

    def rs_c_ag_sliced_state(s):
        """rs-c-ag, keeping the optimizer state sliced (only the weights are gathered)."""
        rs, ag = s.split(grad_allreduce)
        s.reorder(*updates, before=ag)
        s.as_slice(*state)

    @schedule(program)
    def fuse_rs_c_ag(s):
        """rs-c-ag-sliced-state as one FusedAllReduce kernel."""
        rs, ag = s.split(grad_allreduce)
        sliced = s.reorder(*updates, before=ag)
        s.as_slice(*state)
        s.fuse(rs, *sliced, *gathered)

    def fuse_rs_c_ag_ce(s):
        """fuse-rs-c-ag with copy engines moving the bytes, 8 pieces per slice."""
        rs, ag = s.split(grad_allreduce)
        sliced = s.reorder(*updates, before=ag)
        s.as_slice(*state)
        s.copy_engines(s.fuse(rs, *sliced, *gathered), chunks=8)

    def fuse_rs_c_ag_ring(s):
        """fuse-rs-c-ag carried by NCCL's ring across nodes, the update applied per chunk as
        it arrives (CoCoNet's fused collective; simulated only, not generated)."""
        rs, ag = s.split(grad_allreduce)
        sliced = s.reorder(*updates, before=ag)
        s.as_slice(*state)
        s.ring(s.fuse(rs, *sliced, *gathered))

    fused = [fuse_rs_c_ag] + ([schedule(program)(fuse_rs_c_ag_ce)] if copy_engines else [])
    if len(elementwise_runs(program, updates)) == 1:  # no norms: the ring can carry it
        fused.append(schedule(program)(fuse_rs_c_ag_ring))
    if not state:  # nothing to keep sliced: the schedule would be rs-c-ag again
        return [ar_opt, rs_c_ag, *fused]
    return [ar_opt, rs_c_ag, schedule(program)(rs_c_ag_sliced_state), *fused]
