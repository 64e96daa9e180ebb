"""The tools around the library: the ``gemmlab`` command (cli), the benchmark
harness (bench/), the autotuner (tune), verification (verify), the accuracy
table (accuracy) and compile-only kernel inspection (inspect_kernels)."""
