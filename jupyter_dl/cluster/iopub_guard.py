"""Keep the ipyparallel client's IOPub stream open whatever an engine publishes.

pyzmq closes a ZMQStream whose callback raises, and ipyparallel's client handles a widget's comm message by
reaching for `get_ipython().kernel`, which a terminal IPython or a script does not have: one `tqdm.auto` loop or
`display(ipywidgets.IntProgress())` in a distributed cell there left every later cell without the ranks' output,
live metrics or errors' text. A message the client cannot handle is now dropped (logged) instead of the stream.
In a notebook kernel the client relays widgets as before."""

import functools
import logging

log = logging.getLogger(__name__)


def guard_iopub() -> None:
    """Wrap Client._dispatch_iopub once, before any client connects (the stream keeps the method it was given)."""
    from ipyparallel.client.client import Client

    original = Client._dispatch_iopub
    if getattr(original, "_jdl_guarded", False):
        return

    @functools.wraps(original)
    def dispatch_iopub(self, msg):
        try:
            return original(self, msg)
        except Exception:
            log.debug("dropped an IOPub message the client could not handle", exc_info=True)

    dispatch_iopub._jdl_guarded = True  # type: ignore[attr-defined]
    Client._dispatch_iopub = dispatch_iopub
