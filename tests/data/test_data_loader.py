"""DataLoader: the distributed contract (exact invariants on index-valued data)."""

import math

import numpy as np
import pytest

from minidl.data import ArrayDataset, DataLoader


def indexed(n, shape=(1, 2, 2)):
    """A dataset whose sample i has every pixel = i and label i, so batches reveal indices."""
    images = np.broadcast_to(np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1), (n, *shape)).copy()
    return ArrayDataset(images, np.arange(n))


def epoch_batches(loader):
    return [y for _, y in loader]


def all_ranks(n, batch, world, **kw):
    return [DataLoader(indexed(n), batch, rank=r, world_size=world, **kw) for r in range(world)]


@pytest.mark.parametrize(
    "n, batch, world",
    [(10, 3, 3), (10, 1, 1), (10, 1, 4), (7, 2, 4), (64, 8, 2), (13, 5, 1), (3, 4, 4), (100, 7, 3)],
)
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_contract(n, batch, world, shuffle, drop_last):
    loaders = all_ranks(n, batch, world, shuffle=shuffle, seed=5, drop_last=drop_last)
    per_rank = [epoch_batches(loader) for loader in loaders]
    steps = n // (batch * world) if drop_last else math.ceil(n / (batch * world))
    assert all(len(batches) == steps == len(loader) for batches, loader in zip(per_rank, loaders))
    seen = (
        np.concatenate([y for batches in per_rank for y in batches]) if steps else np.array([], int)
    )
    assert len(seen) == len(set(seen.tolist()))  # disjoint
    if drop_last:
        assert len(seen) == steps * batch * world
    else:
        assert sorted(seen.tolist()) == list(range(n))  # every sample exactly once
    single = DataLoader(indexed(n), batch * world, shuffle=shuffle, seed=5, drop_last=drop_last)
    for step, global_batch in enumerate(epoch_batches(single)):  # W ranks x b == 1 process x W*b
        joined = np.concatenate([per_rank[r][step] for r in range(world)])
        np.testing.assert_array_equal(joined, global_batch)
        assert loaders[0].global_batch_size(step) == len(global_batch)
        sizes = [len(per_rank[r][step]) for r in range(world)]
        assert max(sizes) - min(sizes) <= 1 and all(s <= batch for s in sizes)


def test_batches_match_their_labels_and_types():
    loader = DataLoader(indexed(10), 4, shuffle=True, seed=1)
    for x, y in loader:
        assert x.dtype == np.float32 and x.flags.c_contiguous and y.dtype == np.int64
        np.testing.assert_array_equal(x[:, 0, 0, 0], y.astype(np.float32))
        assert loader.current_global_batch_size == len(y)


def test_empty_batch_on_a_rank_keeps_the_image_shape():
    images = np.zeros((10, 1, 28, 28), np.float32)
    last = [
        list(DataLoader(ArrayDataset(images, np.arange(10)), 3, rank=r, world_size=3))[-1]
        for r in range(3)
    ]
    assert [len(y) for _, y in last] == [1, 0, 0]
    assert last[2][0].shape == (0, 1, 28, 28) and last[2][1].shape == (0,)


def test_shuffle_is_seeded_per_epoch_and_seed():
    def order(seed, epoch):
        loader = DataLoader(indexed(50), 50, shuffle=True, seed=seed)
        loader.set_epoch(epoch)
        return next(iter(loader))[1]

    np.testing.assert_array_equal(order(0, 0), order(0, 0))
    assert not np.array_equal(order(0, 0), order(0, 1))
    assert not np.array_equal(order(0, 0), order(1, 0))
    assert sorted(order(3, 7).tolist()) == list(range(50))


def test_epoch_counter_and_set_epoch_agree():
    auto = DataLoader(indexed(20), 20, shuffle=True, seed=2)
    first, second = next(iter(auto))[1], next(iter(auto))[1]
    assert auto.epoch == 2 and not np.array_equal(first, second)
    manual = DataLoader(indexed(20), 20, shuffle=True, seed=2)
    manual.set_epoch(1)
    np.testing.assert_array_equal(next(iter(manual))[1], second)


def test_unshuffled_order_is_the_dataset_order():
    ys = np.concatenate(epoch_batches(DataLoader(indexed(11), 4)))
    np.testing.assert_array_equal(ys, np.arange(11))


def test_transform_gets_a_seeded_rng():
    def add_noise(x, y, rng):
        return x + rng.standard_normal(x.shape).astype(np.float32), y

    run = [
        np.concatenate(
            [x for x, _ in DataLoader(indexed(9), 4, shuffle=True, seed=s, transform=add_noise)]
        )
        for s in (0, 0, 1)
    ]
    np.testing.assert_array_equal(run[0], run[1])
    assert not np.allclose(run[0], run[2])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(batch_size=2.5), "batch_size must be a positive integer"),
        (dict(batch_size=2, world_size=0), "world_size must be a positive integer"),
        (dict(batch_size=2, rank=2, world_size=2), r"rank 2 is outside 0\.\.1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataLoader(indexed(4), **kwargs)


def test_dataset_without_arrays_is_rejected():
    with pytest.raises(TypeError, match="ArrayDataset"):
        DataLoader([(1, 2)], 1)


def test_first_n_items_are_views_of_the_same_pairs():
    data = ArrayDataset(np.arange(20.0).reshape(10, 2), np.arange(10), classes=("a", "b"))
    head = data.first(4)
    assert len(head) == 4 and head.classes == ("a", "b")
    for i in range(4):
        np.testing.assert_array_equal(head[i][0], data[i][0])
        assert head[i][1] == data[i][1]
    assert np.shares_memory(head.images, data.images)
    assert data.first(None) is data and data.first(0) is data
