"""Products with a thin side, bound by memory: a handful of rows (a decode step's
x @ W.t(): the large operand streamed once, gemv) or of K (a weight gradient at a
token: C written once, outer), or a batch of matrices so small that each fits a
block (batched_small).  Each rung's host code beside its .cu file."""
