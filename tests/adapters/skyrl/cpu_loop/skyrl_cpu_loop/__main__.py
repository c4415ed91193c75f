"""``python -m skyrl_cpu_loop <SkyRL overrides>``: advbudget's SkyRL entry point, on CPU."""

import sys

from skyrl_cpu_loop import main

if __name__ == "__main__":
    main(sys.argv[1:])
