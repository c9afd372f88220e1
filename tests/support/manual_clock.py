"""A clock the test moves by hand, for the pool's injected clock (pool/gang.py): leases expire and waits grow only
when a test says time passed."""


class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now
