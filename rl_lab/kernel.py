"""`python -m rl_lab.kernel`: what Jupyter kernel specs registered before the kernel moved to
rl_lab.tools.kernel still run.  It only calls that module; `python -m rl_lab.tools.kernel install`
registers the new path."""
from rl_lab.tools.kernel import main

if __name__ == "__main__":
    main()
