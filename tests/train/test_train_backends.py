"""The training loop and CLI with ``--backend`` / ``--optimizer`` / ``--cuda-graph``.

The fused backend runs its Triton kernels under the interpreter here (26 tables: about 0.5 s a step at batch
16), so these runs are a few steps long; the step-for-step equality with eager is tested on small tables in
``tests/model/test_model_backends.py``, and the graph step on a GPU below.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from kernels import runtime
from lecture_code import data as criteo
from lecture_code.data import Batch
from lecture_code.model import DLRM, DLRMConfig
from lecture_code.training import (
    TrainConfig,
    make_graphed_train_step,
    make_optimizers,
    make_train_step,
    train,
)
from lecture_code.training.cli import main
from lecture_code.training.train import check_config


@pytest.mark.skipif(
    not runtime.interpreting(), reason="the fused kernels on CPU tensors need Triton's interpreter"
)
def test_cli_fused_backend_trains_and_writes_an_eager_checkpoint(tiny_data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["--data", str(tiny_data), "--run-dir", str(run_dir), "--device", "cpu", "--no-progress"]
    args += ["--holdout-fraction", "0.02", "--steps", "3", "--batch-size", "16"]
    main([*args, "--backend", "fused", "--optimizer", "rowwise_adagrad"])
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3 and state["config"]["backend"] == "fused"
    momentum = state["embedding_optimizer"]["state"]
    assert len(momentum) == 26 and any(bool((m["momentum"] > 0).any()) for m in momentum.values())
    # the checkpoint is an eager model's: it loads into one as it is
    eager = DLRM.from_metadata(criteo.load_metadata(tiny_data), preset="small")
    eager.load_state_dict(state["model"])
    assert sorted(state["model"]) == sorted(eager.state_dict())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(backend="fused", optimizer="adam"), "--optimizer sgd or --optimizer rowwise_adagrad"),
        (dict(backend="compile", cuda_graph=True), "for compile use its own cudagraphs"),
        (dict(backend="jax"), "backend must be one of"),
        (dict(optimizer="lamb"), "optimizer must be one of"),
    ],
)
def test_impossible_configs_are_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        check_config(TrainConfig(**overrides))


def test_the_cuda_graph_step_needs_a_gpu():
    model = DLRM(DLRMConfig.preset("small", (5, 9), hashing="modulus"))
    batch = Batch(torch.randn(8, 13), torch.randint(0, 100, (8, 2)), torch.ones(8))
    with pytest.raises(RuntimeError, match="needs the model on a GPU"):
        make_graphed_train_step(model, make_optimizers(model, "sgd", 0.1), batch)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("backend", "optimizer"),
    [("eager", "sgd"), ("eager", "adam"), ("fused", "sgd"), ("fused", "rowwise_adagrad")],
)
def test_a_cuda_graph_step_equals_the_uncaptured_step(backend, optimizer):
    tables = (3, 1000, 100_000, 17) * 4

    def model_and_optimizers():
        torch.manual_seed(0)
        m = DLRM(
            DLRMConfig.preset("small", tables, hashing="modulus"), backend=backend,
            embedding_optimizer="sgd" if optimizer == "adam" else optimizer, embedding_lr=0.05,
        ).cuda()  # fmt: skip
        return m, make_optimizers(m, optimizer, 0.05)

    gen = torch.Generator().manual_seed(1)
    batches = [
        Batch(
            torch.randn(512, 13, generator=gen),
            torch.randint(-1, 1 << 30, (512, len(tables)), generator=gen),
            torch.randint(0, 2, (512,), generator=gen).float(),
        ).to("cuda")
        for _ in range(4)
    ]  # fmt: skip
    plain, plain_opts = model_and_optimizers()
    graphed, graphed_opts = model_and_optimizers()
    for group in (g for opt in plain_opts if isinstance(opt, torch.optim.Adam) for g in opt.param_groups):
        # The graphed step makes Adam capturable (step count and bias correction on the device, in fp32): the
        # same arithmetic here, so the comparison tests the capture, not two roundings that Adam's m/√v turns
        # into visible differences wherever a gradient is near zero.
        group["capturable"] = True
    step = make_train_step(plain, plain_opts)
    graph_step = make_graphed_train_step(graphed, graphed_opts, batches[0])
    for batch in batches:
        torch.testing.assert_close(graph_step(batch), step(batch), atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(plain.state_dict().items(), graphed.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.gpu
def test_a_cuda_graph_step_keeps_its_model_alive():
    """The graph records addresses only: dropping every other reference to the model must not free the
    weights its replays write (a second model would be handed the same memory)."""
    torch.manual_seed(0)
    model = DLRM(DLRMConfig.preset("small", (5, 9), hashing="modulus"), backend="fused").cuda()
    batch = Batch(torch.randn(8, 13), torch.randint(0, 100, (8, 2)), torch.ones(8)).to("cuda")
    step = make_graphed_train_step(model, make_optimizers(model, "sgd", 0.1), batch)
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is not None and step.model is alive()
    step(batch)


@pytest.mark.gpu
def test_train_with_a_cuda_graph_matches_train_without(tiny_data, tmp_path):
    common = dict(
        data_dir=str(tiny_data), steps=30, batch_size=256, log_every=10, checkpoint_every=0, progress=False,
        backend="fused", optimizer="sgd", lr=0.05,
    )  # fmt: skip
    plain = train(TrainConfig(run_dir=str(tmp_path / "a"), **common), log=lambda _: None)
    graphed = train(TrainConfig(run_dir=str(tmp_path / "b"), cuda_graph=True, **common), log=lambda _: None)
    assert graphed.losses == pytest.approx(plain.losses, abs=1e-5)
    assert graphed.final["logloss"] == pytest.approx(plain.final["logloss"], abs=1e-5)
