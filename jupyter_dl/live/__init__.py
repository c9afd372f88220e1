"""Kernel side of the live training view: collect what ranks publish, keep a bounded picture of it, draw it."""
