"""Secrets for ranks: `--secret NAME` takes a value from the kernel's environment or a secrets file and hands it
to the ranks' environment for one job. The value never enters the notebook, the job store or the logs: relayed
output and stored logs are redacted, and names the cell binds to a secret value do not come back."""

import json
import os

from jupyter_dl.errors import UsageError


def resolve(names, secrets_file):
    """{name: value} for each requested secret; a missing one is a usage error naming where we looked."""
    if not names:
        return {}
    from_file = {}
    path = os.path.expanduser(secrets_file) if secrets_file else ""
    if path and os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                from_file = json.load(f)
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"cannot read secrets file {path} ({exc}); it must be a JSON object of names to values"
            ) from None
    values = {}
    for name in names:
        value = os.environ.get(name, from_file.get(name))
        if value is None:
            where = path or "a secrets file"
            raise UsageError(
                f"secret {name!r} is neither in the kernel's environment nor in {where}; "
                f"export it before starting Jupyter or add it to that file (never to the notebook)"
            )
        values[name] = str(value)
    return values


class Redactor:
    """Replaces secret values in text with a placeholder naming the secret."""

    def __init__(self, secrets: dict):
        # Longest first, so a secret that contains another is replaced whole.
        self._pairs = sorted(((v, f"[secret {k}]") for k, v in secrets.items() if v), key=lambda p: -len(p[0]))

    def __call__(self, text):
        for value, placeholder in self._pairs:
            if value in text:
                text = text.replace(value, placeholder)
        return text

    def __bool__(self):
        return bool(self._pairs)

    def leaks(self, text) -> bool:
        return any(value in text for value, _ in self._pairs)
