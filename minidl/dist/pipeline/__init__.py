"""Pipeline parallelism (layer pipelining; the survey, §5.3): stages, schedules, simulator, trainer.

``partition`` cuts a ``Sequential`` into stages; ``schedules`` lists, per rank, the
instructions of naive, GPipe, 1F1B and interleaved 1F1B pipelines;
``simulate.simulate`` runs them without MPI (deadlock freedom, bubble, live activations);
``PipelineTrainer`` runs them over a ``Communicator`` with the serial result.
"""

from minidl.dist.pipeline import simulate
from minidl.dist.pipeline.schedules import SCHEDULES, Instruction, build
from minidl.dist.pipeline.simulate import DeadlockError, ScheduleError, ideal_bubble
from minidl.dist.pipeline.stages import Partition, Stage, partition
from minidl.dist.pipeline.trainer import PipelineTrainer

__all__ = [
    "SCHEDULES",
    "DeadlockError",
    "Instruction",
    "Partition",
    "PipelineTrainer",
    "ScheduleError",
    "Stage",
    "build",
    "ideal_bubble",
    "partition",
    "simulate",
]
