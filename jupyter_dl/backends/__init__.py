"""Distributed backends. Horovod is the one we ship; it is confined to horovod.py."""
