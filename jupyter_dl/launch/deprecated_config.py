"""Settings of a renamed Configurable, still read under the old section name with a deprecation message."""

import warnings


def adopt_renamed_section(configurable, old: str) -> list:
    """Apply `c.<old>.<name>` to `configurable` for every trait it has that `c.<New>.<name>` does not set, and warn
    once per name. Returns the names taken over."""
    config = configurable.config
    if old not in config:
        return []
    new = type(configurable).__name__
    current = config[new] if new in config else {}
    traits = configurable.class_traits(config=True)
    adopted = []
    for name, value in config[old].items():
        if name not in traits:
            warnings.warn(f"c.{old}.{name} is not a setting of {new}; it is ignored", stacklevel=3)
            continue
        if name in current:
            continue  # the new name wins
        setattr(configurable, name, value)
        adopted.append(name)
        warnings.warn(
            f"c.{old}.{name} is deprecated (the class was renamed so it is not mistaken for one of ipyparallel's "
            f"launchers): use c.{new}.{name}",
            FutureWarning,  # shown by default: the message must reach a user who never asked for warnings
            stacklevel=3,
        )
    return adopted
