"""Under ``srun --mpi=pmi2`` a rank speaks MPICH's PMI-1 to SLURM, unless told otherwise."""

from minidl.dist.job import pmi_for_slurm

SRUN = {"PMI_FD": "7", "SLURM_STEP_ID": "0"}


def test_a_rank_of_srun_pmi2_asks_for_pmi1_and_nothing_else_changes():
    started_by_srun = dict(SRUN)
    pmi_for_slurm(started_by_srun)
    assert started_by_srun == {**SRUN, "MPIR_CVAR_PMI_VERSION": "1"}
    chosen = {**SRUN, "MPIR_CVAR_PMI_VERSION": "2"}  # the user's own choice stays
    pmi_for_slurm(chosen)
    assert chosen["MPIR_CVAR_PMI_VERSION"] == "2"
    for elsewhere in ({"PMI_FD": "7"}, {"SLURM_STEP_ID": "0"}, {}):  # mpiexec; a batch shell
        before = dict(elsewhere)
        pmi_for_slurm(elsewhere)
        assert elsewhere == before
