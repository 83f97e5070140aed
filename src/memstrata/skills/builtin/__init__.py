"""The builtin skills, one folder each; a package so ``importlib.resources`` can find them."""
