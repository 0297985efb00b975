"""``minidl bench conv``: the table's numbers are consistent with the algorithms they describe."""

import pytest

import minidl as md
from minidl_app.cli.bench_conv import selected_layers
from minidl_app.conv_bench import bench_layer, format_rows


def test_bench_layer_reports_errors_times_and_unsupported_algorithms():
    rows = {
        r.algo: r
        for r in bench_layer(
            "lenet.conv2", 16, ("im2col", "winograd_f4x4_3x3", "auto"), repeats=1, use_torch=False
        )
    }
    assert rows["winograd_f4x4_3x3"].forward_ms is None
    assert "5x5 kernel" in rows["winograd_f4x4_3x3"].note
    im2col = rows["im2col"]
    assert im2col.error < 1e-5  # float32 against the float64 direct convolution
    assert im2col.train_ms > 0 and im2col.forward_ms > 0
    geom = md.conv.make_geometry((64, 6, 14, 14), (16, 6, 5, 5))  # LeNet rows use batch 64
    assert im2col.gflops == pytest.approx(2 * geom.direct_multiplies() / im2col.forward_ms / 1e6)
    assert im2col.workspace_mb == pytest.approx(
        md.conv.workspace_bytes("im2col", geom, "forward") / 2**20
    )
    assert rows["auto"].note.startswith("chose forward=")
    table = format_rows(list(rows.values()))
    assert "lenet.conv2" in table and "5x5 kernel" in table


def test_layer_selection_by_prefix():
    assert selected_layers(["lenet"]) == ["lenet.conv1", "lenet.conv2"]
    assert selected_layers(["alexnet.conv3", "3x3.c64"]) == ["alexnet.conv3", "3x3.c64.56px"]
    with pytest.raises(SystemExit, match="no layer matches"):
        selected_layers(["vgg"])
