"""The embedded local cluster's engines run at a lower priority than the notebook (EngineCluster.engine_niceness),
every thread of them, TensorFlow's too: on the notebook's own host the browser and the kernel go first."""

import os


def _pid_and_threads():
    import tensorflow as tf

    tf.constant(1.0) + 1.0  # TensorFlow's thread pools exist once an op has run
    return os.getpid(), len(os.listdir("/proc/self/task"))


def _niceness_of_each_thread(pid):
    values = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                values.append(int(stat.read().rsplit(")", 1)[1].split()[16]))  # field 19: nice
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return values


def test_every_thread_of_a_local_engine_runs_at_the_configured_niceness(dl_session):
    import jupyter_dl

    assert dl_session.cluster.engine_niceness == 5  # the default
    ranks = jupyter_dl.distribute(_pid_and_threads, n=2, all_ranks=True)
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the kernel itself is left as it is
    for pid, threads in ranks:
        assert threads > 5, threads  # TensorFlow's pools are among them
        assert set(_niceness_of_each_thread(pid)) == {5}, (pid, _niceness_of_each_thread(pid))
