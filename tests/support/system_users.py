"""Real system users for a test (a hub's local spawner runs each user's server as that user), made with useradd and
removed with every process they own, and the way to the Python environment opened to them alone.

The venv's interpreter may live where other users cannot go (pyenv under /root, mode 0700): rather than open such a
directory to everyone, each directory on the way that others cannot traverse gets a POSIX ACL entry granting these
users search (x) only, written as the kernel's `system.posix_acl_access` xattr (no `acl` package needed), and taken
out afterwards.
"""

import contextlib
import os
import pathlib
import pwd
import signal
import struct
import subprocess
import time

import psutil

_ACL = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_SEARCH = 1


def remove(name):
    """Kill every process of `name` (by pid), then delete the user and its home; nothing when there is no such user.
    Processes first: userdel refuses a user who still runs something, and a left-over kernel or engine would load
    the machine."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    deadline = time.monotonic() + 20
    while owned := [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]:
        for process in owned:
            with contextlib.suppress(psutil.Error, ProcessLookupError):  # it may end between the listing and here
                os.kill(process.pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"processes of {name} survive SIGKILL: {[p.pid for p in owned]}"
        time.sleep(0.1)
    subprocess.run(["userdel", "--remove", name], check=True, capture_output=True)


@contextlib.contextmanager
def users(names):
    """Fresh users with homes, removed at the end however the test ends. A user left by a killed earlier run (same
    name) is removed first."""
    made = []
    try:
        for name in names:  # all first: a new user would otherwise take a uid a left-over one frees only later
            remove(name)
        for name in names:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
            made.append(name)
        yield {name: pwd.getpwnam(name) for name in names}
    finally:
        for name in reversed(made):
            remove(name)


@contextlib.contextmanager
def reachable(paths, uids):
    """Let `uids` reach `paths` (files or directories): every directory above them that others cannot search gets
    an ACL entry for each uid, taken out again at the end (with the ACL itself when nothing else is left in it)."""
    blocked = []
    for path in paths:
        for directory in reversed(pathlib.Path(os.path.realpath(path)).parents):
            if not os.stat(directory).st_mode & 0o001 and directory not in blocked:
                blocked.append(directory)
    try:
        for directory in blocked:
            _set_search(directory, uids, True)
        yield blocked
    finally:
        for directory in blocked:
            _set_search(directory, uids, False)


def _set_search(directory, uids, grant):
    """Add (grant) or take out the named-user entries of `uids` in the directory's access ACL; taking out also drops
    entries of uids no user has any more (left by a killed run), which a later new user would inherit."""
    try:
        raw = os.getxattr(directory, _ACL)
        entries = [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]
    except OSError:  # no ACL: the mode as one (owner, group, other)
        mode = os.stat(directory).st_mode
        entries = [(_USER_OBJ, mode >> 6 & 7, _NO_ID), (_GROUP_OBJ, mode >> 3 & 7, _NO_ID), (_OTHER, mode & 7, _NO_ID)]
    kept = [e for e in entries if e[0] != _MASK and not (e[0] == _USER and (e[2] in uids or not _exists(e[2])))]
    if grant:
        kept += [(_USER, _SEARCH, uid) for uid in uids]
    perms = {tag: perm for tag, perm, _ in kept if tag in (_USER_OBJ, _GROUP_OBJ, _OTHER)}
    if not any(tag in (_USER, _GROUP) for tag, _, _ in kept):  # nothing the mode cannot say: back to the mode alone
        with contextlib.suppress(OSError):
            os.removexattr(directory, _ACL)
        special = os.stat(directory).st_mode & 0o7000
        os.chmod(directory, special | perms[_USER_OBJ] << 6 | perms[_GROUP_OBJ] << 3 | perms[_OTHER])
        return
    # The mask bounds every named entry and the owning group: it lets through all of them.
    mask = 0
    for tag, perm, _ in kept:
        if tag in (_USER, _GROUP_OBJ, _GROUP):
            mask |= perm
    kept.append((_MASK, mask, _NO_ID))
    kept.sort(key=lambda e: (e[0], e[2]))  # the kernel wants them by tag, then id
    os.setxattr(directory, _ACL, struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", *e) for e in kept))


def _exists(uid):
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def become(account):
    """A subprocess.Popen preexec_fn: the child runs as `account` (its groups, gid, then uid), and dies with pytest
    (set after the switch, which clears a parent-death signal set before)."""
    from process_guard import die_with_pytest

    def preexec():
        os.initgroups(account.pw_name, account.pw_gid)
        os.setgid(account.pw_gid)
        os.setuid(account.pw_uid)
        die_with_pytest()

    return preexec


def environment(account, **extra):
    """The environment `account` starts with, as a hub's spawner gives it: PATH and the locale from here (not the
    rest: the test's own IPYTHONDIR and Jupyter directories are root's), its home, name and shell, plus `extra`."""
    kept = {name: os.environ[name] for name in ("PATH", "LANG", "LC_ALL") if name in os.environ}
    home = {"HOME": account.pw_dir, "USER": account.pw_name, "LOGNAME": account.pw_name, "SHELL": "/bin/sh"}
    return {**kept, **home, **extra}
