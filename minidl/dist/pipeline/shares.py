"""What a pipeline rank shows evaluation and the checkpoint: its stages alone.

A rank holds its stages' layers and nothing of the others'. Evaluation runs a batch through
the stages in order (``StagesForward``: each rank receives the activation, applies its stage
and sends it on; the last stage's output is broadcast). A checkpoint is the serial model:
``PipelineShares`` streams its state in the serial order, one entry at a time, from the
rank holding it to rank 0 of the pipeline (made whole over tp first, for a ``[tp=T]`` grid),
so rank 0 never holds more than one layer beyond its own stages.
"""

from minidl import backend
from minidl.autograd import Tensor
from minidl.layers import Module
from minidl.perf.pipeline_simulate import place_of

from .executor import recv_array, send_array

ARRAY = "<array>"  # stands for an array in the skeleton of a sent optimizer state


class StagesForward(Module):
    """A trainer's stages as one module: ``forward(x)`` runs the whole batch through every
    stage in order (rank ``place_of(k)`` applies stage k) and returns the last stage's output
    on every rank of the pipeline (collective; ``x`` is read on the first stage's rank)."""

    def __init__(self, trainer):
        super().__init__()
        for index, chunk in enumerate(trainer.chunks):
            setattr(self, f"chunk{index}", chunk)
        object.__setattr__(self, "comm", trainer.comm)

    def forward(self, x):
        comm, chunks = self.comm, list(self._modules.values())
        stages = comm.size * len(chunks)
        xp = backend.get_array_module(x.data)
        for stage in range(stages):
            rank, chunk = place_of(stage, comm.size)
            if rank != comm.rank:
                continue
            before, after = place_of(stage - 1, comm.size)[0], place_of(stage + 1, comm.size)[0]
            if stage > 0 and before != rank:
                x = Tensor(recv_array(comm, before, xp=xp))
            x = chunks[chunk](x)
            if stage < stages - 1 and after != rank:
                send_array(comm, x.data, after)
        last = place_of(stages - 1, comm.size)[0]
        meta = comm.bcast_object((x.shape, x.dtype) if comm.rank == last else None, root=last)
        out = x.data if comm.rank == last else xp.empty(meta[0], dtype=meta[1])
        return Tensor(comm.bcast(xp.ascontiguousarray(out), root=last))


class PipelineShares:
    """A pipeline rank's stages as ``Training.placement``: evaluation runs ``evaluated`` (the
    stages in order) on ``replicas``' shares of the test set; the serial model and optimizer
    state of the stages (their tp ``blocks`` made whole, when given) stream to rank 0 of the
    pipeline; ``scatter_state`` takes this rank's share of a one-process optimizer state."""

    def __init__(self, trainer, replicas, blocks=None):
        self.trainer, self.replicas, self.blocks = trainer, replicas, blocks
        self.evaluated = StagesForward(trainer)

    def _owner(self, name):
        """The rank holding serial entry ``name`` ("<layer index>.<...>")."""
        stage = self.trainer.stage_of_layer[int(name.split(".")[0])]
        return place_of(stage, self.trainer.comm.size)[0]

    def _whole(self, name, value):
        return value if self.blocks is None else self.blocks.whole(name, value)

    def model_state(self):
        """(name, value) of the serial ``state_dict`` in order; the value on rank 0 of the
        pipeline, None elsewhere (collective)."""
        mine = {}
        for chunk in self.trainer.chunks:
            mine.update(chunk.state_dict())
        for name in self.trainer.state_names:
            owner = self._owner(name)
            value = self._whole(name, mine[name]) if owner == self.trainer.comm.rank else None
            yield name, self._to_first(owner, value, send_array, recv_array)

    def optimizer_state(self, state_dict):
        """A one-process optimizer's state dict: ``"hyper"`` on every rank, ``"state"`` a
        generator of per-parameter states in the serial order (on rank 0 of the pipeline,
        None elsewhere; collective). ``state_dict``: this rank's optimizer's (None: no
        parameters here)."""
        trainer = self.trainer
        hypers = trainer.comm.allgather_object(state_dict and state_dict["hyper"])
        hyper = next(h for h in hypers if h is not None)
        return {"hyper": hyper, "state": self._states(state_dict)}

    def _states(self, state_dict):
        trainer, comm = self.trainer, self.trainer.comm
        names = trainer.parameter_names
        local = [names[i] for i in trainer.serial_indices]
        states = iter(state_dict["state"] if state_dict is not None else ())
        if state_dict is not None and self.blocks is not None:
            states = self.blocks.whole_states(local, state_dict["state"])
        for name in names:
            owner = self._owner(name)
            state = next(states) if owner == comm.rank else None
            yield self._to_first(owner, state, _send_state, _recv_state)

    def scatter_state(self, whole):
        """This rank's share of ``whole``, a one-process optimizer state (None: no parameters)."""
        share = self.trainer.optimizer_share(whole)
        if share is None or self.blocks is None:
            return share
        names = [self.trainer.parameter_names[i] for i in self.trainer.serial_indices]
        return {**share, "state": list(self.blocks.block_states(names, share["state"]))}

    def _to_first(self, owner, value, send, recv):
        """``value`` from rank ``owner`` on rank 0 (None on the others)."""
        comm = self.trainer.comm
        if owner == 0:
            return value if comm.rank == 0 else None
        if comm.rank == owner:
            send(comm, backend.to_numpy(value) if hasattr(value, "shape") else value, 0)
        elif comm.rank == 0:
            return recv(comm, owner)
        return None


def _send_state(comm, state, dest):
    """A per-parameter optimizer state: its skeleton (scalars as they are), then its arrays."""
    comm.send_object({k: ARRAY if hasattr(v, "shape") else v for k, v in state.items()}, dest)
    for value in state.values():
        if hasattr(value, "shape"):
            send_array(comm, backend.to_numpy(value), dest)


def _recv_state(comm, source):
    skeleton = comm.recv_object(source)
    return {k: recv_array(comm, source) if v == ARRAY else v for k, v in skeleton.items()}
