"""Engine-side code: runs inside ipyparallel engines, never in the kernel."""
