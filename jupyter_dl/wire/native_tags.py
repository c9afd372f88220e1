"""How a rank marks the lines native code wrote to its fd 2 (runtime/native_stderr.py tags them), and how the
kernel's output relay and the job store read them back."""

import re

# Marks a line that native code wrote to fd 2. Control characters around a readable name: invisible in most
# renderings if one ever leaked, and easy to find when it does.
NATIVE_TAG = "\x1ejdl-native\x1f"
# A tagged line runs from its tag to the end of its line (a Python write may have been cut by it mid-line), or to
# the end of the text while it is still being written.
_TAGGED_LINE = re.compile(re.escape(NATIVE_TAG) + r"[^\n]*(?:\n|$)")


def drop_native(text: str) -> str:
    """`text` without the native lines (tagged) in it; what a user's own writes put there stays, in order."""
    return _TAGGED_LINE.sub("", text) if NATIVE_TAG in text else text


def untag(text: str) -> str:
    """`text` with native lines kept as plain lines (for logs, and for `--output all`)."""
    return text.replace(NATIVE_TAG, "") if NATIVE_TAG in text else text
