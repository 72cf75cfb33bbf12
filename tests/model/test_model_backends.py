"""The backend switch: eager, compile and fused are one model (same init, keys, outputs, training step).

Models and batches live where the kernels run (``default_device()``: the CPU under the Triton interpreter,
the GPU on a GPU machine, where the fused kernels refuse CPU tensors). Small, for the interpreter: 4 tables
of 3–50 rows (ids repeat within a batch: the fused backward must sum a row's gradients before updating it),
batch 24. Tolerances: fp32 throughout; the fused kernels sum in another order than eager autograd (sorted
segments vs index_add, one ``tl.dot`` vs ``bmm``), so results agree to a few ulps of the values involved —
``atol = rtol = 1e-5`` with a margin of ~10×.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from dlrm_test_data import random_batch, random_metadata

from kernels.reference import rowwise_adagrad_step
from kernels.runtime import default_device
from lecture_code.data import Batch
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.training import RowWiseAdagrad, evaluate, make_optimizers, make_train_step
from lecture_code.training.optimizers import embedding_optimizer_state, load_embedding_optimizer_state

TABLES = (3, 7, 50, 11)
TOL = dict(atol=1e-5, rtol=1e-5)
DEVICE = default_device()  # where the fused kernels run; eager runs beside them on the same device


def _config(hashing: str = "modulus", **overrides) -> DLRMConfig:
    return DLRMConfig.preset("small", TABLES, hashing=hashing, over_arch_layer_sizes=(32, 1), **overrides)


def _pair(optimizer: str = "sgd", lr: float = 0.05, hashing: str = "modulus", vocabularies=None):
    """(eager, fused) DLRMs from one seed, each with its optimizers from the training code."""
    models = []
    for backend in ("eager", "fused"):
        torch.manual_seed(1234)
        model = DLRM(
            _config(hashing), vocabularies, backend=backend, embedding_optimizer=optimizer, embedding_lr=lr
        ).to(DEVICE)
        models.append((model, make_optimizers(model, optimizer, lr)))
    return models


def _batch(rng: np.random.Generator, batch: int = 24) -> Batch:
    dense = torch.from_numpy(np.log1p(rng.exponential(10.0, size=(batch, 13))).astype(np.float32))
    sparse = torch.from_numpy(rng.integers(-1, 1 << 20, size=(batch, len(TABLES)), dtype=np.int64))
    label = torch.from_numpy(rng.integers(0, 2, size=batch).astype(np.float32))
    return Batch(dense, sparse, label).to(DEVICE)


def _tables(model: DLRM) -> list[torch.Tensor]:
    return [model.state_dict()[f"sparse_arch.embeddings.{f}.weight"] for f in range(len(TABLES))]


def test_one_seed_gives_one_model_in_every_backend():
    eager, fused = (m for m, _ in _pair())
    torch.manual_seed(1234)
    compiled = DLRM(_config(), backend="compile").to(DEVICE)  # built, not run: compiling on a CPU takes ~15 s
    a, b, c = eager.state_dict(), fused.state_dict(), compiled.state_dict()
    assert list(a) == list(b) == list(c)
    for key in a:
        assert torch.equal(a[key], b[key]) and torch.equal(a[key], c[key]), key


@pytest.mark.parametrize("hashing", ["modulus", "vocabulary", "index"])
def test_fused_forward_matches_eager(rng, hashing):
    metadata = random_metadata(rng, len(TABLES))
    models = []
    for backend in ("eager", "fused"):
        torch.manual_seed(7)
        models.append(
            DLRM.from_metadata(metadata, hashing=hashing, backend=backend, embedding_dim=16).to(DEVICE)
        )
    dense, sparse = (t.to(DEVICE) for t in random_batch(rng, metadata, 19))  # odd batch
    for training in (True, False):  # training: the fused lookup requires grad; eval: a plain lookup
        for m in models:
            m.train(training)
        torch.testing.assert_close(models[1](dense, sparse), models[0](dense, sparse), **TOL)


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
def test_fused_training_steps_equal_eager(rng, optimizer):
    (eager, eager_opts), (fused, fused_opts) = _pair(optimizer)
    assert fused_opts[1] is None and eager_opts[1] is not None  # fused: the tables have no torch optimizer
    assert {id(p) for p in fused_opts[0].param_groups[0]["params"]} == {
        id(p) for p in fused.dense_parameters()
    }
    # The dense layers step by SGD on both sides: torch's Adagrad moves a weight by lr·g/(|g| + eps) on its
    # first step, so a gradient that cancels to ~eps turns the summation order's last-ulp difference into
    # ~1e-5 of weight (seed 208037511); SGD keeps the dense comparison one of gradients.
    eager_opts, fused_opts = (
        (torch.optim.SGD(m.dense_parameters(), lr=0.05), o[1])
        for m, o in ((eager, eager_opts), (fused, fused_opts))
    )
    steps = [make_train_step(eager, eager_opts), make_train_step(fused, fused_opts)]
    before = [t.clone() for t in _tables(eager)]
    for _ in range(3):
        # each step starts from eager's dense weights: the last-ulp differences a step leaves (the
        # interaction's sums run in another order) would otherwise move a ReLU input that sits at 0 across it
        # in a later step, and that unit's gradient by a whole term (seed 495132147: 7e-5 of weight at step 3)
        with torch.no_grad():
            for pe, pf in zip(eager.dense_parameters(), fused.dense_parameters(), strict=True):
                pf.copy_(pe)
        batch = _batch(rng)
        loss_e, loss_f = (step(batch) for step in steps)
        torch.testing.assert_close(loss_f, loss_e, **TOL)
        for f, (te, tf) in enumerate(zip(_tables(eager), _tables(fused), strict=True)):
            torch.testing.assert_close(tf, te, **TOL, msg=f"table {f}")
        for pe, pf in zip(eager.dense_parameters(), fused.dense_parameters(), strict=True):
            torch.testing.assert_close(pf, pe, **TOL)
    changed = [(t != b).any(dim=1) for t, b in zip(_tables(fused), before, strict=True)]
    assert all(c.any() for c in changed)  # every table trained
    assert not changed[2].all()  # and the 50-row table kept rows no batch touched
    if optimizer == "rowwise_adagrad":  # the state agrees too, in the eager optimizer's layout
        se = embedding_optimizer_state(eager, eager_opts[1])
        sf = embedding_optimizer_state(fused, None)
        for f in range(len(TABLES)):
            torch.testing.assert_close(sf["state"][f]["momentum"], se["state"][f]["momentum"], **TOL)


def test_rowwise_adagrad_matches_the_reference(rng):
    weight = torch.from_numpy(rng.standard_normal((9, 5)).astype(np.float32))
    grad = torch.from_numpy(rng.standard_normal((9, 5)).astype(np.float32))
    grad[[1, 4]] = 0.0  # untouched rows
    expected_w, expected_m = weight.clone(), torch.full((9,), 0.5)
    rowwise_adagrad_step(expected_w, expected_m, grad, lr=0.1, eps=1e-8)
    param = torch.nn.Parameter(weight.clone())
    opt = RowWiseAdagrad([param], lr=0.1)
    param.grad = grad
    opt.state[param]["momentum"] = torch.full((9,), 0.5)
    opt.step()
    torch.testing.assert_close(param.detach(), expected_w, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(opt.state[param]["momentum"], expected_m, atol=1e-6, rtol=1e-6)


def test_holdout_metrics_follow_the_same_trajectory(rng):
    (eager, eager_opts), (fused, fused_opts) = _pair("sgd", lr=0.2)
    holdout = [_batch(rng, 64)]
    steps = [make_train_step(eager, eager_opts), make_train_step(fused, fused_opts)]
    for _ in range(4):
        batch = _batch(rng)
        for step in steps:
            step(batch)
        e, f = evaluate(eager, holdout), evaluate(fused, holdout)
        assert f["logloss"] == pytest.approx(e["logloss"], abs=1e-5)
        assert f["auc"] == pytest.approx(e["auc"], abs=1e-3)  # a tie may flip at 1e-7: one pair of 64²


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
def test_checkpoints_move_between_backends(rng, optimizer):
    (eager, eager_opts), (fused, fused_opts) = _pair(optimizer)
    make_train_step(eager, eager_opts)(_batch(rng))  # eager trains a step (the Adagrad state is non-zero)
    # eager → fused: weights and the tables' optimizer state
    fused.load_state_dict(copy.deepcopy(eager.state_dict()))
    fused_opts[0].load_state_dict(eager_opts[0].state_dict())  # the dense optimizer: same layout
    load_embedding_optimizer_state(fused, None, embedding_optimizer_state(eager, eager_opts[1]))
    batch = _batch(rng)
    loss_e = make_train_step(eager, eager_opts)(batch)
    loss_f = make_train_step(fused, fused_opts)(batch)
    torch.testing.assert_close(loss_f, loss_e, **TOL)
    for te, tf in zip(_tables(eager), _tables(fused), strict=True):
        torch.testing.assert_close(tf, te, **TOL)
    # fused → a fresh eager model: the same weights and state, bit for bit
    torch.manual_seed(99)
    back = DLRM(_config()).to(DEVICE)
    back.load_state_dict(fused.state_dict())
    back_opts = make_optimizers(back, optimizer, 0.05)
    load_embedding_optimizer_state(back, back_opts[1], embedding_optimizer_state(fused, None))
    for key, value in fused.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    if optimizer == "rowwise_adagrad":
        sf = embedding_optimizer_state(fused, None)["state"]
        for f, p in enumerate(back.embedding_parameters()):
            assert torch.equal(back_opts[1].state[p]["momentum"], sf[f]["momentum"])


def test_fused_state_dict_is_strict_about_keys_and_shapes():
    eager, fused = (m for m, _ in _pair())
    state = eager.state_dict()
    del state["sparse_arch.embeddings.1.weight"]
    state["sparse_arch.embeddings.9.weight"] = torch.zeros(2, 16)
    expected = r"(?s)Missing key.*embeddings\.1\.weight.*Unexpected.*embeddings\.9"
    with pytest.raises(RuntimeError, match=expected):
        fused.load_state_dict(state)
    state = eager.state_dict()
    state["sparse_arch.embeddings.2.weight"] = torch.zeros(49, 16)
    with pytest.raises(RuntimeError, match="size mismatch for sparse_arch.embeddings.2.weight"):
        fused.load_state_dict(state)


def test_parameter_split_and_clear_errors():
    eager, fused = (m for m, _ in _pair())
    assert len(eager.embedding_parameters()) == len(TABLES) and fused.embedding_parameters() == []
    assert len(fused.dense_parameters()) == len(list(fused.parameters())) == len(eager.dense_parameters())
    with pytest.raises(ValueError, match="backend must be one of"):
        DLRM(_config(), backend="fast")
    with pytest.raises(ValueError, match="fuses the dot interaction"):
        DLRM(_config(interaction="outer"), backend="fused")
    with pytest.raises(ValueError, match="embedding_optimizer='rowwise_adagrad'"):
        make_optimizers(fused, "rowwise_adagrad", 0.1)  # the model was built for SGD


def test_the_training_config_sets_the_fused_learning_rate():
    _, (fused, _) = _pair("sgd", lr=0.05)
    make_optimizers(fused, "sgd", 0.25)
    assert fused.sparse_arch.lr == 0.25 and fused.sparse_arch.lr_tensor.item() == 0.25


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["compile", "fused"])
def test_backends_match_eager_on_the_gpu(backend):
    torch.manual_seed(0)
    eager = DLRM(_config()).cuda()
    torch.manual_seed(0)
    other = DLRM(_config(), backend=backend).cuda()
    dense = torch.randn(256, 13, device="cuda")
    sparse = torch.randint(-1, 1 << 30, (256, len(TABLES)), device="cuda")
    torch.testing.assert_close(other(dense, sparse), eager(dense, sparse), atol=1e-4, rtol=1e-4)
