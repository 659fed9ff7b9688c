"""A batch's fate, with no I/O beyond the writer's buffers: decoded, judged and staged.

:mod:`.rules` declares every rule an event must pass, with its reject reason and sentence;
:mod:`.validation` turns a received batch into events and bad events into rejection reasons;
:mod:`.stages` holds the stage protocol (which stage may follow which, how many cycles may be open);
:mod:`.staging` takes a decoded batch to staged lines (idempotency, ``seq``, encoding) for the
writer of :mod:`gz_ia.collector.storage`. The process that receives batches is
:mod:`gz_ia.collector.service`.
"""
