"""Move ``@triton.jit`` functions between Triton's interpreter and its compiler, and undo its patches.

``@triton.jit`` decides at decoration time what it returns: under ``TRITON_INTERPRET=1`` an
``InterpretedFunction`` (runs on CPU tensors with numpy, cannot be compiled), otherwise a ``JITFunction``
(compiles, cannot be called from an interpreted kernel). This lecture does both in one process: it runs
inductor's Triton on the CPU (:mod:`lecture_code.triton_cpu.inductor_on_cpu`) and compiles kernels for an H100
(:mod:`lecture_code.ptx`). This module turns one kind into the other:

- :func:`jit_function`: the compilable ``JITFunction`` behind any kernel, interpreted or wrapped;
- :func:`interpretable_helpers` / :func:`compilable_helpers`: swap the ``@triton.jit`` helpers of
  ``triton.language`` and inductor's ``triton_helpers`` (``tl.sigmoid``, ``triton_helpers.maximum``) for the
  other kind while a block runs;
- :func:`restore_triton_language` / :func:`unpatched_language`: undo the numpy patches the interpreter
  leaves behind in ``triton.language``;
- :func:`set_env`: an environment variable (``TRITON_INTERPRET``) set for one block.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lecture_code.internals import (
    INDUCTOR_HELPER_MODULE,
    interpreted_function_class,
    interpreter_module,
    jit_function_class,
)

__all__ = [
    "compilable_helpers",
    "interpretable_helpers",
    "jit_function",
    "language_objects",
    "restore_triton_language",
    "set_env",
    "unpatched_language",
]

_MISSING = object()

# Modules whose ``@triton.jit`` helpers kernels call (``tl.sigmoid``, ``tl.max``, ``triton_helpers.maximum``).
_HELPER_MODULE_PREFIXES = ("triton.language", INDUCTOR_HELPER_MODULE)


@contextmanager
def set_env(name: str, value: str) -> Iterator[None]:
    """Set the environment variable ``name`` to ``value`` in the block; restore it (or its absence) after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


# ---------------------------------------------------------------------------------------------------------
# From whatever the decorator produced to a compilable JITFunction
# ---------------------------------------------------------------------------------------------------------
def jit_function(kernel: Any, _memo: dict[int, Any] | None = None) -> Any:
    """The compilable ``triton.runtime.JITFunction`` behind ``kernel``.

    Under ``TRITON_INTERPRET=1`` (every CPU machine here) ``@triton.jit`` returns an ``InterpretedFunction``
    that cannot be compiled; ``@triton.autotune`` / ``@triton.heuristics`` / inductor's heuristics wrap the
    function once more. This unwraps all of those and rebuilds a ``JITFunction`` from the Python function,
    converting the ``@triton.jit`` helpers it names as globals the same way (helpers reached through a
    module, ``tl.sigmoid`` or ``triton_helpers.maximum``, are swapped while compiling:
    see :func:`compilable_helpers`).
    """
    JITFunction = jit_function_class()
    memo = {} if _memo is None else _memo
    if id(kernel) in memo:
        return memo[id(kernel)]
    interpreted = interpreted_function_class()
    if isinstance(kernel, JITFunction):
        if not _has_interpreted_globals(kernel.fn):
            memo[id(kernel)] = kernel
            return kernel
        noinline = getattr(kernel, "noinline", None)
        return _rebuild(kernel, {"noinline": noinline} if noinline else {}, memo)
    if interpreted is not None and isinstance(kernel, interpreted):
        return _rebuild(kernel, dict(getattr(kernel, "kwargs", {})), memo)
    inner = getattr(kernel, "fn", None)
    if inner is not None and inner is not kernel:  # Autotuner, Heuristics, inductor's CachingAutotuner
        return jit_function(inner, memo)
    raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")


def _has_interpreted_globals(fn: Any) -> bool:
    interpreted = interpreted_function_class()
    if interpreted is None:
        return False
    for value in fn.__globals__.values():
        if isinstance(value, interpreted):
            return True
        if isinstance(value, types.ModuleType) and any(
            isinstance(v, interpreted) for v in vars(value).values()
        ):
            return True
    return False


def _rebuild(kernel: Any, jit_kwargs: dict[str, Any], memo: dict[int, Any]) -> Any:
    """A ``JITFunction`` of ``kernel.fn`` whose globals have every interpreted helper converted."""
    fn = kernel.fn
    new_globals: dict[str, Any] = {}
    clone = types.FunctionType(fn.__code__, new_globals, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__module__ = fn.__module__
    clone.__qualname__ = fn.__qualname__
    clone.__doc__ = fn.__doc__
    result = jit_function_class()(clone, **jit_kwargs)
    memo[id(kernel)] = result  # before converting the globals: recursive helpers find it
    interpreted = interpreted_function_class()
    for name, value in fn.__globals__.items():
        # modules keep their identity: compilable_helpers swaps their helpers in place
        is_helper = interpreted is not None and isinstance(value, interpreted)
        new_globals[name] = jit_function(value, memo) if is_helper else value
    return result


# ---------------------------------------------------------------------------------------------------------
# Swapping the helpers of triton.language and triton_helpers for the other kind
# ---------------------------------------------------------------------------------------------------------
@contextmanager
def _swap_helpers(kind: type, make_twin: Callable[[Any], Any]) -> Iterator[int]:
    """Replace every ``kind`` helper in the helper modules by ``make_twin(helper)`` (one twin per helper,
    shared by every module that holds it); put the originals back on exit. Yields how many were swapped."""
    twins: dict[int, Any] = {}
    swapped: list[tuple[Any, str, Any]] = []
    try:
        for name, module in list(sys.modules.items()):
            if module is None or not name.startswith(_HELPER_MODULE_PREFIXES):
                continue
            for attr, value in list(vars(module).items()):
                if isinstance(value, kind):
                    if id(value) not in twins:
                        twins[id(value)] = make_twin(value)
                    swapped.append((module, attr, value))
                    setattr(module, attr, twins[id(value)])
        yield len(twins)
    finally:
        for module, attr, value in reversed(swapped):
            setattr(module, attr, value)


@contextmanager
def interpretable_helpers() -> Iterator[int]:
    """Make ``@triton.jit`` helpers defined *before* ``TRITON_INTERPRET=1`` callable by the interpreter.

    ``@triton.jit`` decides at decoration time: with the interpreter off it returns a ``JITFunction``, which
    an interpreted kernel cannot call ("Cannot call @triton.jit'd outside of the scope of a kernel"). That
    happens whenever triton was imported before the environment variable was set (always on a GPU machine).
    Swap each such helper, in every module that holds it, for an ``InterpretedFunction`` of the same Python
    function; put the originals back on exit. Yields how many helpers were swapped.
    """
    interpreted = interpreted_function_class()
    if interpreted is None:
        raise RuntimeError("this Triton has no interpreter (triton.runtime.interpreter.InterpretedFunction)")
    with _swap_helpers(jit_function_class(), lambda helper: interpreted(helper.fn)) as count:
        yield count


@contextmanager
def compilable_helpers() -> Iterator[int]:
    """While compiling, swap the interpreted ``@triton.jit`` helpers of triton's language modules (and
    inductor's ``triton_helpers``) for compilable ``JITFunction`` twins; put the originals back after.

    Under ``TRITON_INTERPRET=1`` even ``tl.sigmoid`` and ``tl.max`` are interpreted functions, which the
    compiler refuses ("Unsupported function referenced").
    """
    interpreted = interpreted_function_class()
    if interpreted is None:
        yield 0
        return
    JITFunction = jit_function_class()

    def twin(helper: Any) -> Any:
        return JITFunction(helper.fn, **getattr(helper, "kwargs", {}))

    with _swap_helpers(interpreted, twin) as count:
        yield count


# ---------------------------------------------------------------------------------------------------------
# The interpreter's leftover patches in triton.language
# ---------------------------------------------------------------------------------------------------------
def language_objects() -> list[Any]:
    """The modules and classes Triton's interpreter patches while a kernel runs."""
    import triton.language as tl

    objects: list[Any] = [tl, tl.core, tl.math, getattr(tl, "standard", tl)]
    objects += [c for c in vars(tl.core).values() if isinstance(c, type) and c.__module__ == tl.core.__name__]
    return list({id(o): o for o in objects}.values())


@contextmanager
def restore_triton_language() -> Iterator[None]:
    """Put ``triton.language`` back exactly as it was when the block began.

    The interpreter swaps ``tl``'s builtins for numpy versions while a kernel runs and undoes it afterwards,
    but a ``@triton.jit`` *helper* called from an interpreted kernel (``triton_helpers.maximum``, every
    kernel inductor writes) patches the modules in its own globals (``triton.language.core``) and never
    undoes it. Compiling for a GPU later in the same process then fails deep inside Triton
    (``lecture_code.ptx`` needs the real builtins), so snapshot and restore.
    """
    snapshot = [(obj, dict(vars(obj))) for obj in language_objects()]
    try:
        yield
    finally:
        injected = _interpreter_globals()
        for obj, before in snapshot:
            now = dict(vars(obj))
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    try:
                        setattr(obj, name, value)
                    except (AttributeError, TypeError):
                        pass
            for name in now.keys() - before.keys():
                if injected.get(name, _MISSING) is now[name]:
                    continue  # put there by the interpreter's rewriter: its cached rewrites still read it
                try:
                    delattr(obj, name)
                except (AttributeError, TypeError):
                    pass


def _interpreter_globals() -> dict[str, Any]:
    """What the interpreter copies into the module globals of each function it rewrites (its own module
    globals, ``interpreter_semantic`` among them). The rewrite is cached per function for the process, so
    these names must stay: deleting them made every later kernel calling ``tl.sum`` fail with a NameError."""
    interpreter = interpreter_module()
    return {} if interpreter is None else dict(vars(interpreter))


def _interpreter_original(value: Any) -> Any:
    """The builtin behind an interpreter patch (``lambda *a, member=<builtin>, **k: …``), else ``None``."""
    found = None
    while "_patch_attr" in getattr(value, "__qualname__", "") and "member" in (value.__kwdefaults__ or {}):
        value = found = value.__kwdefaults__["member"]
    return found


@contextmanager
def unpatched_language() -> Iterator[int]:
    """Undo, while compiling, the interpreter patches left behind in ``triton.language``.

    The interpreter patches ``tl``'s builtins while a kernel runs; a helper called from an interpreted
    kernel leaves its patches behind (``lecture_code.triton_cpu.inductor_on_cpu`` cleans up after itself with
    :func:`restore_triton_language`, other code may not), and the compiler then fails with "'value' object
    has no attribute 'dtype'". Each patch keeps the original builtin as a default argument, so put that
    back for the compile and the patch after. Yields how many patches were undone.
    """
    repaired: list[tuple[Any, str, Any]] = []
    try:
        for obj in language_objects():
            for name, value in list(vars(obj).items()):
                original = _interpreter_original(value)
                if original is not None:
                    repaired.append((obj, name, value))
                    setattr(obj, name, original)
        yield len(repaired)
    finally:
        for obj, name, value in reversed(repaired):
            setattr(obj, name, value)
