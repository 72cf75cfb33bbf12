"""One training step, eager or compiled: the step the loop runs and the CUDA graph captures.

The loop (:mod:`.train`) runs it and :mod:`.graphs` captures it. It has a module of its own so that both
import it and neither imports the other.
"""

from __future__ import annotations

import torch

__all__ = ["make_train_step"]


def make_train_step(model, optimizer, compile_model: bool = False, *, loss_fn=None, after_backward=None):
    """``step(batch) -> loss`` (detached, on the device): zero grads, forward + BCE loss, backward, step.

    ``optimizer``: one optimizer or a sequence of them (``None`` entries skipped: the fused backend's tables
    have none, their update runs inside ``backward``). ``compile_model``: ``torch.compile`` forward + loss.
    ``loss_fn(logits, label)``: the loss (default ``F.binary_cross_entropy_with_logits``, mean);
    ``after_backward()``: called after ``loss.backward()``, before the optimizers step (e.g. the ``join`` of
    :func:`lecture_code.perf.mlp_sgd_in_backward.sgd_in_backward`).
    """
    items = optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]
    optimizers = [o for o in items if o is not None]
    loss_fn = loss_fn or torch.nn.functional.binary_cross_entropy_with_logits

    def forward_loss(dense, sparse, label):
        return loss_fn(model(dense, sparse), label)

    forward = torch.compile(forward_loss) if compile_model else forward_loss

    def train_step(batch) -> torch.Tensor:
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss = forward(batch.dense, batch.sparse, batch.label)
        loss.backward()  # the fused backend's tables are updated here
        if after_backward is not None:
            after_backward()
        for opt in optimizers:
            opt.step()
        return loss.detach()

    return train_step
