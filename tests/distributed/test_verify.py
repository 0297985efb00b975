"""``minidl verify`` and ``md.dist.verify`` under mpiexec: see verify_checks.py."""

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

VERIFY = ["-m", "minidl", "verify", "--subset", "128", "--batch-size", "8", "--steps", "2"]


def test_layouts_equal_one_process_and_injected_mistakes_are_named(run_checks):
    run_checks(
        2,
        "layouts_on_two_ranks_equal_one_process",
        "batch_norm_without_sync_is_named",
        "batch_norm_on_image_blocks_equals_one_process",
        "dropout_equals_one_process_on_every_layout",
        "a_row_parallel_layer_without_its_allreduce_is_named",
        "a_gradient_averaged_twice_is_named",
        "a_pipeline_that_drops_a_micro_batch_gradient_is_named",
        script="verify_checks.py",
        timeout=240,
    )


def test_grids_on_four_ranks_equal_one_process(run_checks):
    run_checks(
        4,
        "grids_on_four_ranks_equal_one_process",
        "batch_norm_on_image_blocks_equals_one_process",
        "dropout_equals_one_process_on_every_layout",
        script="verify_checks.py",
        timeout=180,
    )


def test_the_command_says_equal_with_status_0(mpi_run):
    result = mpi_run(2, *VERIFY, "--model", "lenet5", "--grid", "tp=2", timeout=120)
    assert result.returncode == 0, result.output
    summary = next(line for line in result.output.splitlines() if line.startswith("verify: "))
    assert summary.startswith("verify: grid tp=2 equals one process over 2 steps"), summary


def test_the_command_names_the_first_difference_with_status_1(mpi_run):
    """ResNet-20's replicas normalise their shards alone: its first batch norm (layer 1)."""
    result = mpi_run(2, *VERIFY, "--model", "resnet20", "--steps", "1", timeout=180)
    assert result.returncode == 1, result.output
    lines = result.output.strip().splitlines()  # the run's log first, the launcher's last
    first = next(line for line in lines if line.startswith("step "))
    summary = next(line for line in lines if line.startswith("verify: "))
    assert summary.endswith("differ from one process; the first: " + first), summary
    assert first.startswith("step 0: output of layer 1: max abs error"), first


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--dist", "asp"], "asp is not meant to equal one process"),
        (["--grid", "pp=2", "--schedule", "pipedream", "--micro-batches", "2"], "pipedream"),
        (["--compress", "topk:0.1"], "changes the gradients on purpose"),
    ],
)
def test_the_command_refuses_what_is_not_meant_to_equal_one_process(mpi_run, flags, words):
    result = mpi_run(2, *VERIFY, *flags, timeout=60)
    assert result.returncode == 1, result.output
    assert words in result.output and "Traceback" not in result.output, result.output
