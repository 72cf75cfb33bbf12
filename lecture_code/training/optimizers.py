"""The training loop's optimizers, one per kind of parameter, the same for every backend.

``TrainConfig.optimizer`` names the pair (``lr`` from the config, ``eps = 1e-8``):

| optimizer           | dense parameters (the MLPs)  | embedding tables                                      |
|---------------------|------------------------------|-------------------------------------------------------|
| ``adam``            | ``torch.optim.Adam``         | ``torch.optim.Adam`` (eager/compile only)             |
| ``sgd``             | ``torch.optim.SGD``          | SGD: ``torch.optim.SGD``, or fused into backward      |
| ``rowwise_adagrad`` | ``torch.optim.Adagrad``      | row-wise Adagrad: :class:`RowWiseAdagrad`, or fused   |

``rowwise_adagrad`` is TorchRec's DLRM recipe (dense Adagrad, FBGEMM's ``EXACT_ROWWISE_ADAGRAD`` on the
tables: one fp32 accumulator per row instead of per element). The fused backend cannot run Adam on the tables:
Adam's per-element state would make every step a pass over all of them (2 GiB for the Kaggle tables).

Two optimizers instead of one over ``model.parameters()``: the same arithmetic (every rule here is per
parameter), and the dense optimizer's state has the same layout in every backend, so a checkpoint's optimizer
state moves between backends too. With the fused backend there is no table optimizer object: backward already
updated the tables, and ``model.sparse_arch`` holds the state (:func:`embedding_optimizer_state`).
"""

from __future__ import annotations

import torch

__all__ = [
    "OPTIMIZERS",
    "RowWiseAdagrad",
    "embedding_optimizer_state",
    "load_embedding_optimizer_state",
    "make_optimizers",
]

OPTIMIZERS = ("adam", "sgd", "rowwise_adagrad")
EPS = 1e-8


class RowWiseAdagrad(torch.optim.Optimizer):
    """FBGEMM's exact row-wise Adagrad over ``[n, D]`` tables with dense gradients, eager PyTorch.

    Per row ``r`` with gradient ``g_r``: ``m_r += mean_D(g_r²)``; ``w_r -= lr · g_r / (sqrt(m_r) + eps)``.
    A row the batch did not touch has ``g_r = 0`` and stays as it is (``m_r`` too), so applying the rule to
    every row equals applying it to the touched ones, with no host sync to find them (the reference
    :func:`kernels.reference.rowwise_adagrad_step` selects them; tests compare the two). State per table:
    ``momentum [n]`` fp32.
    """

    def __init__(self, params, lr: float = 0.01, eps: float = EPS):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("RowWiseAdagrad takes dense gradients (nn.Embedding(sparse=False))")
                state = self.state[p]
                if not state:
                    state["momentum"] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
                g = p.grad.float()
                m = state["momentum"]
                m += (g * g).mean(dim=1)
                p.sub_((group["lr"] * g / (m.sqrt() + group["eps"])[:, None]).to(p.dtype))
        return loss


Optimizer = torch.optim.Optimizer


def make_optimizers(model, kind: str, lr: float) -> tuple[Optimizer, Optimizer | None]:
    """``(dense optimizer, table optimizer or None)`` for ``model`` (a :class:`~lecture_code.model.DLRM`).

    The table optimizer is ``None`` for the fused backend: ``model.sparse_arch`` applies ``kind`` inside
    backward with the same ``lr`` (set here, so the model's and the config's cannot disagree)."""
    if kind not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {kind!r}")
    dense = model.dense_parameters()
    if kind == "adam":
        dense_opt = torch.optim.Adam(dense, lr=lr)
    elif kind == "sgd":
        dense_opt = torch.optim.SGD(dense, lr=lr)
    else:
        dense_opt = torch.optim.Adagrad(dense, lr=lr, eps=EPS)
    if model.fuses_embedding_optimizer:
        fused = model.sparse_arch
        if fused.optimizer != kind:
            raise ValueError(
                f"the fused backend applies {fused.optimizer!r} to the tables inside backward, the config "
                f"asks for {kind!r}: build it with embedding_optimizer={kind!r} (Adam cannot be fused: "
                "its per-element state would be a pass over every table each step)"
            )
        fused.lr = lr
        return dense_opt, None
    tables = model.embedding_parameters()
    if kind == "adam":
        return dense_opt, torch.optim.Adam(tables, lr=lr)
    if kind == "sgd":
        return dense_opt, torch.optim.SGD(tables, lr=lr)
    return dense_opt, RowWiseAdagrad(tables, lr=lr, eps=EPS)


def embedding_optimizer_state(model, embedding_opt) -> dict | None:
    """The table optimizer's state dict, wherever it lives (the optimizer, or the fused sparse arch)."""
    if model.fuses_embedding_optimizer:
        return model.sparse_arch.embedding_optimizer_state_dict()
    return embedding_opt.state_dict() if embedding_opt is not None else None


def load_embedding_optimizer_state(model, embedding_opt, state: dict | None) -> None:
    """Inverse of :func:`embedding_optimizer_state` (a fused state loads into an eager optimizer and back)."""
    if state is None:
        return
    if model.fuses_embedding_optimizer:
        model.sparse_arch.load_embedding_optimizer_state_dict(state)
    elif embedding_opt is not None:
        embedding_opt.load_state_dict(_as_torch_optim_state(embedding_opt, state))


def _as_torch_optim_state(opt: torch.optim.Optimizer, state: dict) -> dict:
    """A fused state dict (only lr, eps in its group) completed with ``opt``'s other group settings."""
    group = {**opt.param_groups[0], **state["param_groups"][0]}
    group.pop("params")
    params = state["param_groups"][0]["params"]
    return {"state": state["state"], "param_groups": [{**group, "params": params}]}
