#!/usr/bin/env python3
"""The bias_dropout_residual_layernorm kernel against PyTorch.

The command line of bert/tools/kernel_bench/bias_dropout_residual_layernorm.py (`--help`).
"""

from bert.tools.kernel_bench.bias_dropout_residual_layernorm import main

if __name__ == "__main__":
    main()
