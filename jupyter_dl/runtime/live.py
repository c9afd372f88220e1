"""Engine side: stream training metrics to the kernel without slowing training down.

Records are buffered and flushed at most every `flush_interval` seconds through ipyparallel's data publication
(one iopub message, sent by zmq's I/O thread), so the training loop pays for a dict append per batch and one small
message per interval. Each flush uses a new key (`jdl.<rank>.<seq>`): the client keeps every key of a result, so
no flush is lost however slowly the kernel polls.

Rank 0 sends per-batch and per-epoch metrics; every rank sends its throughput. `--manual` users add
`LiveMetrics()` to their own `fit(callbacks=...)`.
"""

FLUSH_INTERVAL = 0.1


def engine_publisher():
    """ipyparallel's publish_data when running inside an engine, else None (then records are only kept locally)."""
    try:
        from ipykernel.zmqshell import ZMQInteractiveShell
    except ImportError:
        return None
    if not ZMQInteractiveShell.initialized() or getattr(ZMQInteractiveShell.instance(), "data_pub", None) is None:
        return None
    from ipyparallel.datapub import publish_data

    return publish_data


def __getattr__(name):
    # LiveMetrics subclasses a Keras class; importing Keras only when it is first used keeps this module cheap.
    if name == "LiveMetrics":
        from .live_callback import LiveMetrics

        return LiveMetrics
    raise AttributeError(name)
