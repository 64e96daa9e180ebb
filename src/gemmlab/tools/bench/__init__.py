"""The benchmark harness: every measurement beside cuBLAS, in the same run."""
