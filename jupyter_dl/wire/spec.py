"""The contract between the kernel and one rank: what `rank.run` is called with through ipyparallel `apply`.

Both sides import this module, so the fields and their defaults are written down once. It imports nothing heavy
(no TensorFlow, no Horovod): the kernel builds specs before any engine has started. A plain dataclass, so it pickles
by reference on its way to engines that have jupyter-dl installed.
"""

from dataclasses import dataclass, field

from jupyter_dl.wire.options import RunOptions

# The name a cell's last expression's value comes back under (from rank 0), for the cell to show it as Out[n].
OUT_NAME = "_jdl_out"


@dataclass
class RankSpec:
    rank: int = 0
    size: int = 1
    env: dict = field(default_factory=dict)  # Horovod's rendezvous environment for this rank
    mode: str = "cell"  # 'cell': exec `code`; 'fn': call the pickled `fn`
    code: str = ""
    fn: bytes | None = None  # cloudpickled (function, args, kwargs)
    all_ranks: bool = False  # fn mode: every rank sends its return value back
    names_in: list = field(default_factory=list)  # shipped values the cell reads (held by the engine)
    names_out: list = field(default_factory=list)  # names the cell binds, sent back from rank 0
    job_name: str = ""
    options: RunOptions = field(default_factory=RunOptions)  # the job's options, as declared in wire/options.py
    attempt: int = 0  # 0 the first run, then one more per --restarts restart
    balance_batches: bool = False  # --balance, decided for this job: split the global batch by measured speed
    stall_s: float | None = None  # seconds in one collective before the rank reports a stall
    resource_interval: float = 0  # seconds between resource samples; 0: none
    secret_values: dict = field(default_factory=dict)  # --secret name -> value, in os.environ for this job only
    kernel_pid: int | None = None  # the rank stops itself if this kernel dies (same host only)
    kernel_host: str | None = None
    # The notebook's global Keras dtype policy (e.g. "mixed_float16" set in an earlier cell, as the mixed-precision
    # guide does), or None when the kernel has not loaded Keras: the engine keeps its own.
    dtype_policy: str | None = None
    keras_registrations: dict = field(default_factory=dict)  # name read -> registered Keras name of its class
    # A seeded notebook's random generators (wire/random_state.py), taken by every rank just before the cell; None:
    # the notebook set no seed.
    random_state: dict | None = None
    # Environment variables the notebook's cells set (kernel/notebook_env.py), in os.environ for this job only.
    notebook_env: dict = field(default_factory=dict)
    # The notebook's working directory and import path: a helper module beside the notebook, an os.chdir or a
    # sys.path.append in an earlier cell hold on the ranks too (where the directories exist on their host).
    kernel_cwd: str = ""
    kernel_sys_path: list = field(default_factory=list)
    job_id: str = ""
    # An elastic job (-n MIN:MAX): where rank 0 reads the kernel's membership requests, and which run of the cell on
    # a group this is (0 the first; later ones resume each fit from the commits in the survivors' memory).
    elastic_board: str = ""
    segment: int = 0
    # An elastic fit over arrays also commits inside an epoch: every this many steps, or (steps 0) about every this
    # many seconds of training; (0, 0): at epoch ends only.
    commit_pace: tuple = (0, 0.0)
