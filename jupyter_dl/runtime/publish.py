"""Engine side: how a rank's records reach the kernel without slowing training down.

Records are buffered and flushed at most every `flush_interval` seconds through ipyparallel's data publication
(one iopub message, sent by zmq's I/O thread), so the training loop pays for a dict append per batch and one small
message per interval. Each flush uses a new key (`jdl.<rank>.<seq>`): the client keeps every key of a result, so
no flush is lost however slowly the kernel polls.

The records are LiveMetrics' (metrics_callback.py: rank 0's batch and epoch metrics, every rank's throughput) and
the resource sampler's (resources.py).
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
