"""The ServerApp: FedAvg over every SuperNode, then the final model, printed for whoever watches the run."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

app = ServerApp()
# A model of at most this many values is printed whole.
SHOWN = 16


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Start from zeros; after N rounds of +1 on every SuperNode, FedAvg's model is N everywhere."""
    rounds = int(context.run_config["num-server-rounds"])
    size = int(context.run_config["array-size"])
    nodes = int(context.run_config["min-nodes"])
    strategy = FedAvg(min_train_nodes=nodes, min_evaluate_nodes=nodes, min_available_nodes=nodes)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(size)]), num_rounds=rounds)
    final = result.arrays.to_numpy_ndarrays()[0]
    # The line a smoke test looks for: every value equal to the number of rounds.
    print(f"SMOKE-RESULT rounds={rounds} model={shown(final)}", flush=True)  # noqa: T201 - the run's output


def shown(model: np.ndarray) -> str:
    """A small model's values; a large one's (array-size above 16) in a few words."""
    if model.size <= SHOWN:
        return str(model.tolist())
    low, high = float(model.min()), float(model.max())
    return f"{model.size} values, each {low}" if low == high else f"{model.size} values from {low} to {high}"
