"""Products with a handful of rows (a decode step's x @ W.t()): the large operand
streamed once at memory bandwidth.  The rung's host code beside its .cu file."""
