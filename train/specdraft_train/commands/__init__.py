"""Commands: one module per stage of `python -m specdraft_train`; none imports another, they talk through files."""
