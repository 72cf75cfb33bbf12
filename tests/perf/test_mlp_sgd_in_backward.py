"""The MLPs' SGD inside their backward takes ``torch.optim.SGD``'s steps and passes the same input grads."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lecture_code.model.mlp import make_mlp
from lecture_code.perf.mlp_sgd_in_backward import LinearSGDInBackward, sgd_in_backward

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("input_grad, lead", [(False, (11,)), (True, (11,)), (True, (2, 3))])
def test_takes_the_sgd_steps_of_torch_optim(device, input_grad, lead):
    lr = 0.3
    torch.manual_seed(0)
    ref = make_mlp(5, (7, 3), final_activation=False).to(device)
    new = copy.deepcopy(ref)
    join = sgd_in_backward(new, lr)
    assert [type(m) for m in new] == [LinearSGDInBackward, nn.ReLU, LinearSGDInBackward]
    assert (new[0].stream is not None) == (device == "cuda")  # a GPU's updates run on side streams
    if device == "cuda":
        assert new[0].stream != new[2].stream  # consecutive layers alternate over two
    assert new.state_dict().keys() == ref.state_dict().keys()
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    for _ in range(3):
        x = torch.randn(*lead, 5, device=device)
        g = torch.randn(*lead, 3, device=device)
        x_ref = x.clone().requires_grad_(input_grad)
        x_new = x.clone().requires_grad_(input_grad)
        opt.zero_grad()
        y_ref = ref(x_ref)
        y_ref.backward(g)
        opt.step()
        y_new = new(x_new)
        y_new.backward(g)
        join()
        torch.testing.assert_close(y_new, y_ref)  # both forwards read the weights before this step's update
        if input_grad:
            torch.testing.assert_close(x_new.grad, x_ref.grad)  # dX read W before the update wrote it
    for (name, p), (name_new, q) in zip(ref.named_parameters(), new.named_parameters(), strict=True):
        assert name == name_new
        torch.testing.assert_close(q, p, msg=name)
        assert q.grad is None  # no gradient tensor: the update consumed it inside backward


@pytest.mark.gpu
def test_layers_alternate_over_the_side_streams():
    mlp = make_mlp(4, (8, 8, 8, 8), final_activation=False).cuda()
    sgd_in_backward(mlp, 0.1, streams=3)
    streams = [m.stream for m in mlp if isinstance(m, LinearSGDInBackward)]
    assert len(streams) == 4 and len(set(streams)) == 3 and streams[3] == streams[0]


def test_a_module_without_linear_layers_is_refused():
    with pytest.raises(ValueError, match="no nn.Linear inside ReLU"):
        sgd_in_backward(nn.ReLU(), 0.1)


def test_streams_below_one_are_refused():
    with pytest.raises(ValueError, match="streams must be at least 1, got 0"):
        sgd_in_backward(make_mlp(3, (2,), final_activation=False), 0.1, streams=0)
