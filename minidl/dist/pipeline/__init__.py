"""Pipeline parallelism (layer pipelining; the survey, §5.3): stages, schedules, trainer.

``partition`` cuts a ``Sequential`` into stages (``memory_partition``: by what they hold);
``schedules`` lists each rank's instructions for naive, GPipe, 1F1B, interleaved 1F1B and
PipeDream pipelines;
``PipelineTrainer`` runs them over a ``Communicator`` with the serial result.
``simulate`` (``minidl.perf.pipeline_simulate``) runs the lists without MPI: deadlock
freedom, bubble, live activations.
"""

from minidl.dist.pipeline.cut import Partition, cut_by_cost, memory_partition, partition
from minidl.dist.pipeline.schedules import SCHEDULES, Instruction, build
from minidl.dist.pipeline.trainer import PipelineTrainer, Stage
from minidl.perf import pipeline_simulate as simulate
from minidl.perf.pipeline_simulate import DeadlockError, ScheduleError, ideal_bubble

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
    "cut_by_cost",
    "memory_partition",
    "partition",
    "simulate",
]
