"""Sequence batching on the worker: the instance that holds a sequence runs its steps.

``spec`` (typed in ``shared.model_config.sequences``) says how; ``support`` refuses at load what is
not built; ``controls`` and ``state`` make the tensors the model sees besides the client's;
``policy`` decides which queued steps form the next execution; ``store`` is every Redis operation of
a holder; ``execution`` runs one batch of steps; ``holder`` is the serving loop of one instance;
``adoption`` moves the sequences of dead holders to live ones.
"""
