"""``minidl summary``'s memory table: the per-layer output kept, one row per rank, the shares
of ZeRO and of a pipeline, and the combinations it refuses in one line."""

import pytest

from minidl_app.cli import main


def run(capsys, *argv):
    assert main(["summary", "--model", "lenet5", *argv]) == 0
    return capsys.readouterr().out


def table(out):
    """The memory table's rows: {rank: cells}."""
    lines = out.split("memory per rank", 1)[1].splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    rows = {}
    for line in lines[rule + 1 :]:
        if not line[:1].isdigit():
            break
        cells = line.split()
        rows[int(cells[0])] = cells
    return rows


def total_bytes(cells):
    return int(cells[-1].replace(",", ""))


def test_the_per_layer_summary_stays_and_one_process_gets_one_row(capsys):
    out = run(capsys, "--batch-size", "4")
    assert "parameters 61,706 (241.0 KiB)" in out and "batch 4" in out
    assert out.splitlines()[0].startswith("lenet5: input 1x28x28, batch 4")
    rows = table(out)
    assert list(rows) == [0] and rows[0][1] == "-"  # no grid coordinates
    assert run(capsys, "--batch", "4") == out


def test_zero_2_over_three_replicas_cuts_61706_parameters_unevenly(capsys):
    """61,706 = 20,569 + 20,569 + 20,568: the last rank keeps one gradient and one momentum
    number fewer (8 bytes); the weights stay whole on every rank."""
    rows = table(run(capsys, "--batch-size", "8", "--grid", "dp=3", "--zero", "2"))
    assert [rows[r][1] for r in range(3)] == ["dp=0", "dp=1", "dp=2"]
    assert total_bytes(rows[0]) == total_bytes(rows[1]) == total_bytes(rows[2]) + 8
    plain = table(run(capsys, "--batch-size", "8", "--grid", "dp=3"))
    saved = (61_706 - 20_569) * 4 * 2  # gradients and momentum of the other shards
    assert total_bytes(plain[0]) - total_bytes(rows[0]) == saved


def test_a_pipeline_rank_shows_its_stage(capsys):
    out = run(capsys, "--batch-size", "8", "--grid", "dp=2,pp=2", "--micro-batches", "2")
    rows = table(out)
    assert len(rows) == 4
    parameters = {rows[r][1]: int(rows[r][3].replace(",", "")) for r in rows}
    assert parameters["dp=0,pp=0"] + parameters["dp=0,pp=1"] == 61_706
    assert parameters["dp=0,pp=0"] == parameters["dp=1,pp=0"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--zero", "1"], "--zero 1 shards the optimizer state over data-parallel replicas"),
        (["--grid", "tp=7"], "tp=7 is wider than layer 0 (Conv2d), which has 6 to split"),
        (["--grid", "pp=13"], "pp=13 cuts the model's 12 layers into 13 stages"),
        (["--grid", "dp=2,pp=2", "--zero", "1"], "--zero with a pipeline"),
        (["--micro-batches", "2"], "add pp=P to --grid"),
        (["--grid", "spatial=2", "--recompute", "2"], "--recompute with --grid spatial=2"),
    ],
)
def test_bad_combinations_are_refused_in_one_line(capsys, flags, message):
    assert main(["summary", "--model", "lenet5", "--batch-size", "8", *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
