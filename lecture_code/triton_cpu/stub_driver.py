"""A Triton driver for a machine without a GPU, so inductor can write Triton for an H100 target.

Triton insists on exactly one active driver and finds none on a CPU ("0 active drivers"). Inductor asks the
driver for a target to hash and tune for; :func:`make_stub_driver` answers ``GPUTarget("cuda", 90, 32)``
(an H100), so the code you read is the code a GPU would get. Anything that needs a real device (launching,
loading a binary) raises instead. :mod:`lecture_code.triton_cpu.inductor_on_cpu` makes it the active driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lecture_code.internals import triton_driver_api

__all__ = ["TARGET_ARCH", "make_stub_driver"]

TARGET_ARCH = 90  # the stub driver reports an sm_90 (H100) target


def make_stub_driver(arch: int = TARGET_ARCH) -> Any:
    """A Triton ``DriverBase`` that is always active and reports ``GPUTarget("cuda", arch, 32)``.

    Built at call time from whatever abstract methods the installed Triton declares, so a method added in
    a later Triton gets a stub that raises instead of a ``TypeError`` at construction.
    """
    DriverBase, GPUTarget = triton_driver_api()

    def _not_on_cpu(name: str) -> Callable[..., Any]:
        def method(self, *args, **kwargs):
            raise RuntimeError(f"the CPU stub Triton driver cannot {name}: there is no GPU on this machine")

        return method

    namespace: dict[str, Any] = {name: _not_on_cpu(name) for name in DriverBase.__abstractmethods__}
    namespace.update(
        is_active=classmethod(lambda cls: True),
        get_current_target=lambda self: GPUTarget("cuda", arch, 32),
        get_active_torch_device=lambda self: torch.device("cpu"),
        map_python_to_cpp_type=lambda self, ty: "void*" if ty.startswith("*") else ty,
        get_current_device=lambda self: 0,
        set_current_device=lambda self, device: None,
        get_current_stream=lambda self, device=None: 0,
        get_device_interface=lambda self: torch.cpu,
        __repr__=lambda self: f"CpuStubDriver(cuda sm_{arch}, for reading generated code)",
    )
    cls = type("CpuStubDriver", (DriverBase,), namespace)
    return cls()
