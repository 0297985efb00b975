"""The command that starts local ranks: what Open MPI is asked for that MPICH does by default,
and the transport it is told to leave out."""

from minidl_app import launch


def test_local_open_mpi_jobs_leave_out_libfabric_unless_the_user_names_transports(monkeypatch):
    monkeypatch.setattr(launch, "mpiexec_path", lambda: "/x/mpiexec")
    monkeypatch.setattr(launch, "mpiexec_flavor", lambda path: "openmpi")
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    prefix, env = launch.mpiexec_command(3)
    assert prefix == ["/x/mpiexec", "--oversubscribe", "-n", "3"]
    assert env["OMPI_MCA_btl"] == "^ofi"
    monkeypatch.setenv("OMPI_MCA_btl", "tcp,self")
    assert "OMPI_MCA_btl" not in launch.mpiexec_command(3)[1]  # the user's choice stands
    monkeypatch.setattr(launch, "mpiexec_flavor", lambda path: "mpich")
    assert launch.mpiexec_command(2) == (["/x/mpiexec", "-n", "2"], {})
