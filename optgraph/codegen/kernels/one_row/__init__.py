"""One-row products: a matrix product with few rows (decode) as one kernel with its prologue and epilogue."""
