"""`python -m jupyter_dl doctor | install-horovod`: the same commands as the `jupyter-dl` console script."""

from jupyter_dl.cli import main

if __name__ == "__main__":
    main()
