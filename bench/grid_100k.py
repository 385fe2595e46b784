"""Scenario D's grid file: a no-op train over a 100,000-point grid (for --dry-run timing)."""

grid = {"a": list(range(100)), "b": list(range(100)), "c": list(range(10))}


def train(params):
    return {"x": 0.0}
