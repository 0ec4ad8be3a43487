"""The ClientApp: adds 1.0 to the model it is sent, and says how far from zero it is."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:  # noqa: ARG001 - Flower's signature
    """One round of 'training': every value grows by one."""
    arrays = msg.content["arrays"].to_numpy_ndarrays()
    trained = [a + 1.0 for a in arrays]
    metrics = MetricRecord({"num-examples": 1})
    return Message(RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:  # noqa: ARG001 - Flower's signature
    """The model's mean value, as an evaluation metric."""
    arrays = msg.content["arrays"].to_numpy_ndarrays()
    mean = float(np.mean(np.concatenate([a.ravel() for a in arrays])))
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1, "mean": mean})}), reply_to=msg)
