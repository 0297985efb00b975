"""The process grid: ``--grid dp=D,pp=P,spatial=S,tp=T`` on D*P*S*T ranks.

Hybrid parallelism (Ben-Nun & Hoefler 2019, section 5.4): one axis per kind, data
(``dp``, replicas), pipeline (``pp``, groups of layers), spatial (``spatial``, parts of
each image) and tensor (``tp``, parts of each layer's weights). Row-major, ``tp`` fastest:

    rank = ((dp_i * P + pp_i) * S + spatial_i) * T + tp_i

so a tensor-parallel group, which talks at every layer, is neighbouring ranks (one node
when ranks are placed by blocks), and data-parallel replicas, which talk once a step,
are farthest apart.
"""

import dataclasses
import math

from minidl.dist.comm import Communicator

AXES = ("dp", "pp", "spatial", "tp")


class GridError(ValueError):
    """A grid that cannot run: a bad ``--grid`` string, or a size that does not fit the job."""


@dataclasses.dataclass(frozen=True)
class GridShape:
    """The extent of each axis; omitted axes are 1."""

    dp: int = 1
    pp: int = 1
    spatial: int = 1
    tp: int = 1

    def __post_init__(self):
        for axis in AXES:
            extent = getattr(self, axis)
            if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
                raise GridError(f"grid {axis}={extent!r}: each axis needs a whole number >= 1")

    @classmethod
    def parse(cls, text: str) -> "GridShape":
        """``"dp=2,tp=2"`` -> ``GridShape(dp=2, tp=2)``; every mistake is named with the fix."""
        extents = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            axis, sep, value = item.partition("=")
            axis = axis.strip()
            if not sep or axis not in AXES:
                raise GridError(
                    f"--grid {text!r}: {item!r} is not AXIS=N with AXIS one of {', '.join(AXES)}"
                    " (e.g. --grid dp=2,tp=2)"
                )
            if axis in extents:
                raise GridError(f"--grid {text!r}: {axis} is given twice; give each axis once")
            try:
                extents[axis] = int(value)
            except ValueError:
                raise GridError(
                    f"--grid {text!r}: {axis}={value.strip()!r} is not a whole number"
                ) from None
        if not extents:
            raise GridError(f"--grid {text!r} names no axis; e.g. --grid dp=2,tp=2")
        return cls(**extents)

    @property
    def size(self) -> int:
        """The number of ranks the grid needs: the product of its extents."""
        return math.prod(self.extents)

    @property
    def extents(self) -> tuple:
        """The extents in ``AXES`` order."""
        return tuple(getattr(self, axis) for axis in AXES)

    def check_fits(self, ranks: int) -> None:
        """Refuse a grid whose product is not the job's rank count, saying what would fit."""
        if self.size != ranks:
            raise GridError(
                f"--grid {self} needs {self.size} ranks but the job has {ranks}: run it with "
                f"mpiexec -n {self.size}, or give a grid whose product is {ranks} "
                f"(e.g. --grid dp={ranks})"
            )

    def coords(self, rank: int) -> dict:
        """The coordinates of ``rank`` on each axis (the inverse of ``rank_of``)."""
        coords = {}
        for axis, extent in reversed(tuple(zip(AXES, self.extents))):
            rank, coords[axis] = divmod(rank, extent)
        return {axis: coords[axis] for axis in AXES}

    def rank_of(self, **coords) -> int:
        """The rank at the given coordinates (omitted ones are 0)."""
        rank = 0
        for axis, extent in zip(AXES, self.extents):
            index = coords.get(axis, 0)
            if not 0 <= index < extent:
                raise GridError(f"grid coordinate {axis}={index} is outside 0..{extent - 1}")
            rank = rank * extent + index
        return rank

    def __str__(self):
        named = [f"{axis}={extent}" for axis, extent in zip(AXES, self.extents) if extent > 1]
        return ",".join(named) or "dp=1"


class Grid:
    """A job's ranks as a grid; ``md.dist.Grid(comm, dp=2, tp=2)`` (collective over ``comm``).
    ``shape``: the extents; ``coords``: this rank's coordinates; ``group(axis)``: the
    ``Communicator`` along an axis, whose ``rank`` is this rank's coordinate on it."""

    def __init__(self, comm: Communicator, dp: int = 1, pp: int = 1, spatial: int = 1, tp: int = 1):
        self.shape = GridShape(dp=dp, pp=pp, spatial=spatial, tp=tp)
        self.shape.check_fits(comm.size)
        self.world = comm
        coords, groups = comm.cartesian(self.shape.extents)
        self.coords = dict(zip(AXES, coords))
        self._groups = dict(zip(AXES, groups))

    @classmethod
    def parse(cls, comm: Communicator, text: str) -> "Grid":
        """The grid of a ``--grid`` string, e.g. ``Grid.parse(comm, "dp=2,pp=2")``."""
        shape = GridShape.parse(text)
        return cls(comm, **dict(zip(AXES, shape.extents)))

    def group(self, axis: str) -> Communicator:
        """The ranks that differ from this one only along ``axis`` (``Create_cart``, ``Sub``)."""
        if axis not in self._groups:
            raise GridError(f"unknown grid axis {axis!r}; choose one of {', '.join(AXES)}")
        return self._groups[axis]

    def __repr__(self):
        return f"Grid({self.shape}, rank {self.world.rank} at {self.coords})"
