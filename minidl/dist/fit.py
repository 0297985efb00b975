"""``fit``: a training run over MPI ranks, as ``minidl train --dist`` and ``--workers`` do."""

from ..train.config import ConfigError, TrainConfig, option
from ..train.run import TrainingRun
from .comm import init
from .config import DistConfig
from .engines import SessionEngine, SyncEngine
from .hybrid import GridEngine
from .pipeline.engine import PipelineEngine
from .workers import fit_on_workers


def fit(
    config: TrainConfig,
    options: DistConfig | None = None,
    resume: str | None = None,
    workers: int = 1,
) -> dict | int | None:
    """Train as ``config`` and ``options`` say on every rank; returns the last evaluation.

    Call it on every rank of an ``mpiexec`` job; or, with ``workers=N`` in a
    plain process, it starts N local ranks of ``sync`` data parallelism and
    returns their exit status (0: finished). ``options`` defaults to ``sync``
    with the default options; ``resume`` is a checkpoint to continue from.
    """
    options = options if options is not None else DistConfig()
    options.check(config.check(), resume)
    if workers > 1:
        if options.mode.name != "sync":
            raise ValueError(
                f"workers={workers} runs sync data parallelism, not {options.mode.text}"
            )
        return fit_on_workers(config, options, resume, workers)
    comm = init()
    engine = SyncEngine if options.mode.name == "sync" else SessionEngine
    if options.grid is not None:
        options.grid.check_fits(comm.size)
        if options.pipelined and options.grid.spatial > 1:
            raise ConfigError(
                f"{option('grid')} {options.grid}: a pipeline (pp) trains through fit with dp "
                "and tp; spatial trains with dp and tp, without pp"
            )
        if options.pipelined:
            engine = PipelineEngine
        elif options.grid.size != options.grid.dp:
            engine = GridEngine
    comm.auto = "rule" if config.deterministic else "measure"

    def make_engine(config, model, train_set):
        return engine(config, options, comm, model, train_set)

    return TrainingRun(config, make_engine, comm, resume).run()
