"""FlashAttentionTorch and FlashAttentionTriton (in the Triton interpreter on a CPU, compiled on
a GPU) against a float64 naive reference on fresh random inputs.

On a GPU every test runs on CUDA with one pinned kernel configuration (``pinned_config``:
autotuning each odd shape would compile ~60 kernels per shape); ``test_every_kept_config``
checks each configuration the autotuner may pick, for each kernel, dtype and head dimension it
is kept for, and ``test_autotuned_launch`` the tuner itself.

Tolerances (``TOLERANCE`` of ``perflab.implementations.attention.correctness``): float32 inputs
atol/rtol 2e-5 for outputs and logsumexp (the tiles sum in another order than the reference),
float16 2e-3 (11 significant bits); gradients 5x those."""

import contextlib

import pytest
import torch

from perflab.implementations.attention import naive_attention
from perflab.implementations.attention.correctness import (
    TOLERANCE,
    correctness_table,
    random_qkv,
    reference,
)
from perflab.implementations.attention.flash_torch import FlashAttentionTorch, flash_attention_torch
from perflab.implementations.model import PRESETS, TransformerLM, cross_entropy
from perflab.measure.device import triton_available

#: Without Triton (macOS, Windows) the PyTorch implementation is still tested.
HAVE_TRITON = triton_available()
NEEDS_TRITON = pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed (Linux-only)")
if HAVE_TRITON:
    from perflab.implementations.attention.flash_configs import kept_configs
    from perflab.implementations.attention.flash_triton import (
        INTERPRETED,
        FlashAttentionTriton,
        flash_attention_triton,
    )
    from perflab.implementations.attention.flash_tuning import pinned_config
    from perflab.tools.kernel_configs import config_jobs

    #: Every kernel at every configuration kept for a dtype and head dimension.
    CONFIG_JOBS = config_jobs()

    import triton
    import triton.language as tl

    from perflab.implementations.attention.flash_forward import _heaviest_first

    @triton.jit
    def _which_tile(Out, IS_CAUSAL: tl.constexpr):
        """Each program writes the query tile the attention kernels would give it."""
        tl.store(Out + tl.program_id(1), _heaviest_first(IS_CAUSAL))
else:
    CONFIG_JOBS, INTERPRETED = [], True
    FlashAttentionTriton = flash_attention_triton = None
    pinned_config = contextlib.nullcontext

IMPLEMENTATIONS = {"torch": FlashAttentionTorch, "triton": FlashAttentionTriton}
#: Parametrize over both implementations; the Triton one is skipped where Triton is missing.
BOTH = [pytest.param("torch"), pytest.param("triton", marks=NEEDS_TRITON)]
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only: needs CUDA")
#: Where the kernels run: compiled Triton takes CUDA tensors only.
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _one_kernel_configuration(request):
    if "autotuned" in request.node.name or "every_kept_config" in request.node.name:
        yield
        return
    with pinned_config():
        yield


def _inputs(batch, n_q, n_k, d, dtype, seed):
    return random_qkv(batch, n_q, n_k, d, dtype, seed, DEVICE)


CASES = [
    # batch, n_q, n_k, d, causal (causal cases keep n_k >= n_q so every query sees a key)
    (1, 1, 5, 16, False),
    (3, 17, 40, 16, True),
    (1, 100, 129, 64, True),
    (3, 129, 100, 64, False),
    (1, 129, 129, 16, True),
    (3, 100, 17, 64, False),
    (1, 17, 100, 64, True),
    (3, 1, 129, 16, True),
]


@pytest.mark.parametrize("implementation", BOTH)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("batch, n_q, n_k, d, causal", CASES)
def test_matches_float64_reference(implementation, batch, n_q, n_k, d, causal, dtype):
    _check_against_reference(IMPLEMENTATIONS[implementation], batch, n_q, n_k, d, causal, dtype)


@GPU
@pytest.mark.parametrize("implementation", BOTH)
@pytest.mark.parametrize(
    "batch, n_q, n_k, d, causal", [(2, 129, 300, 64, True), (1, 1000, 1000, 128, False)]
)
def test_bfloat16_and_compiled_kernels_on_gpu(implementation, batch, n_q, n_k, d, causal):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        _check_against_reference(
            IMPLEMENTATIONS[implementation], batch, n_q, n_k, d, causal, dtype, device="cuda"
        )


@GPU
@pytest.mark.parametrize("job", CONFIG_JOBS, ids=lambda job: job.label)
def test_every_kept_config_computes_the_same_function_on_gpu(job):
    """Whatever configuration the autotuner picks is correct: each kernel pinned to each
    configuration kept for its dtype and head dimension (the other two at their first),
    against float64 on ragged and aligned lengths, causal and not
    (``perflab.tools.kernel_configs``)."""
    from perflab.tools.kernel_configs import check_config

    rows = check_config(job, "cuda")
    if not all(row["fits"] for row in rows):  # the autotuner's pruner drops it on this GPU too
        pytest.skip(f"{job.label} does not fit this GPU: {rows[0]['error']}")
    failed = [row for row in rows if not row["within_tolerance"]]
    assert not failed, failed
    assert all(row["launched_as_pinned"] for row in rows), rows  # it ran the job's tiles


@GPU
def test_autotuned_launch_matches_the_reference_on_gpu():
    _check_against_reference(FlashAttentionTriton, 2, 256, 256, 64, True, torch.float16)


def _check_against_reference(function, batch, n_q, n_k, d, causal, dtype, device=DEVICE):
    q, k, v = (
        t.detach().to(device).requires_grad_()
        for t in _inputs(batch, n_q, n_k, d, dtype, seed=n_q * 1000 + n_k)
    )
    ref_out, ref_lse, grad_out, ref_grads = (_to(x, device) for x in reference(q, k, v, causal))
    out = function.apply(q, k, v, causal)
    tol = TOLERANCE[dtype]
    assert out.dtype == dtype and out.shape == (batch, n_q, d)
    torch.testing.assert_close(out.double(), ref_out, atol=tol, rtol=tol)
    lse = [t for t in out.grad_fn.saved_tensors if t.shape == (batch, n_q)]
    assert len(lse) == 1  # the logsumexp, saved once
    torch.testing.assert_close(lse[0].double(), ref_lse, atol=tol, rtol=tol)
    out.backward(grad_out.to(dtype))
    for grad, ref in zip((q.grad, k.grad, v.grad), ref_grads, strict=True):
        assert grad.dtype == dtype
        torch.testing.assert_close(grad.double(), ref, atol=5 * tol, rtol=5 * tol)


def _to(x, device):
    return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)


@pytest.mark.parametrize("implementation", BOTH)
def test_non_contiguous_inputs(implementation):
    q, k, v = (t.detach().transpose(0, 1) for t in _inputs(20, 2, 2, 16, torch.float32, 1))
    assert not q.is_contiguous()
    out = IMPLEMENTATIONS[implementation].apply(q, k, v, True)
    expected = naive_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("implementation", BOTH)
def test_queries_that_see_no_key_get_zeros(implementation):
    q, k, v = (t.detach() for t in _inputs(1, 8, 3, 16, torch.float32, 2))
    out = IMPLEMENTATIONS[implementation].apply(q, k, v, True)  # queries 0..4 see no key
    assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
    torch.testing.assert_close(out[:, 5:], naive_attention(q, k, v, is_causal=True)[:, 5:])


@pytest.mark.parametrize(
    "shapes, dtypes, message",
    [
        (((2, 4, 8), (2, 5, 8), (2, 6, 8)), None, "shapes do not match"),
        (((2, 4, 8), (3, 5, 8), (3, 5, 8)), None, "shapes do not match"),
        (((4, 8), (5, 8), (5, 8)), None, "must be \\(batch, seq, d\\)"),
        (((2, 4, 8),) * 3, (torch.float32, torch.float16, torch.float32), "dtypes differ"),
    ],
)
@pytest.mark.parametrize("implementation", BOTH)
def test_bad_inputs(implementation, shapes, dtypes, message):
    dtypes = dtypes or (torch.float32,) * 3
    tensors = [torch.randn(*s).to(d) for s, d in zip(shapes, dtypes, strict=True)]
    with pytest.raises(ValueError, match=message):
        IMPLEMENTATIONS[implementation].apply(*tensors, False)


@NEEDS_TRITON
def test_triton_refuses_what_its_kernels_cannot_do():
    with pytest.raises(ValueError, match=r"head dimension 24 unsupported; valid: \(16, 32, 64"):
        FlashAttentionTriton.apply(*(torch.randn(1, 4, 24) for _ in range(3)), False)
    if INTERPRETED:
        bf16 = [torch.randn(1, 4, 16, dtype=torch.bfloat16) for _ in range(3)]
        with pytest.raises(ValueError, match="interpreter cannot compute bfloat16"):
            FlashAttentionTriton.apply(*bf16, False)


@NEEDS_TRITON
def test_compiled_backward_tiles_match_eager():
    q, k, v = _inputs(2, 70, 70, 16, torch.float32, 3)
    grads = {}
    for compiled in (False, True):
        FlashAttentionTorch.compile_tiles = compiled
        try:
            for t in (q, k, v):
                t.grad = None
            FlashAttentionTorch.apply(q, k, v, True).sum().backward()
            grads[compiled] = [t.grad.clone() for t in (q, k, v)]
        finally:
            FlashAttentionTorch.compile_tiles = None
    for eager, compiled in zip(grads[False], grads[True], strict=True):
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "flash",
    [
        pytest.param(flash_attention_torch, id="torch"),
        pytest.param(flash_attention_triton, id="triton", marks=NEEDS_TRITON),
    ],
)
def test_model_training_step_with_flash_matches_naive(flash):
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).to(DEVICE)
    tokens = torch.randint(10_000, (2, 70)).to(DEVICE)
    grads = {}
    for name, attention in (("naive", naive_attention), ("flash", flash)):
        model.zero_grad(set_to_none=True)
        model.set_attention(attention)
        loss = cross_entropy(model(tokens), tokens)
        loss.backward()
        grads[name] = (loss.item(), [p.grad.clone() for p in model.parameters()])
    assert grads["flash"][0] == pytest.approx(grads["naive"][0], rel=1e-6)
    for flash, naive in zip(grads["flash"][1], grads["naive"][1], strict=True):
        torch.testing.assert_close(flash, naive, atol=1e-5, rtol=1e-4)


@NEEDS_TRITON
@pytest.mark.parametrize("shape", [(1, 1), (17, 5), (3, 33, 70), (129, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_weighted_sum_triton_forward_and_backward(shape, dtype):
    from perflab.implementations.attention.weighted_sum import WeightedSumTriton

    generator = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=generator).to(DEVICE, dtype).requires_grad_()
    w = torch.randn(shape[-1], generator=generator).to(DEVICE, dtype).requires_grad_()
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    y = WeightedSumTriton.apply(x, w)
    reference = x64 @ w64
    tol = TOLERANCE[dtype]
    assert y.shape == shape[:-1] and y.dtype == dtype
    torch.testing.assert_close(y.double(), reference, atol=5 * tol, rtol=5 * tol)
    grad = torch.randn(shape[:-1], generator=generator, dtype=torch.float64).to(DEVICE)
    y.backward(grad.to(dtype))
    reference.backward(grad)
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=5 * tol, rtol=5 * tol)
    torch.testing.assert_close(w.grad.double(), w64.grad, atol=20 * tol, rtol=5 * tol)


@NEEDS_TRITON
def test_weighted_sum_bad_inputs():
    from perflab.implementations.attention.weighted_sum import WeightedSumTriton

    with pytest.raises(ValueError, match=r"need x \(..., D\) and w \(D,\)"):
        WeightedSumTriton.apply(torch.randn(3, 4), torch.randn(5))


def test_correctness_table_flags_a_wrong_implementation():
    class OnePercentOff(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, is_causal):
            ctx.save_for_backward(q, k, v)
            return naive_attention(q, k, v, is_causal=is_causal) * 1.01

        @staticmethod
        def backward(ctx, grad):
            return tuple(torch.zeros_like(t) for t in ctx.saved_tensors) + (None,)

    good = correctness_table(FlashAttentionTorch, [(2, 17, 33, 16, True)], torch.float32)
    assert good["within_tolerance"].all() and good["output"].iloc[0] < 1e-5
    bad = correctness_table(OnePercentOff, [(2, 17, 33, 16, True)], torch.float32)
    assert not bad["within_tolerance"].any() and bad["output"].iloc[0] > 1e-3


@NEEDS_TRITON
def test_launch_grid_puts_the_batch_on_the_unlimited_axis():
    """CUDA allows 2^31 - 1 programs on grid axis 0 but 65,535 on axis 1: the batch (batch x
    heads from the model, easily past 65,535) goes on axis 0, the tiles on axis 1."""
    from perflab.implementations.attention.flash_triton import MAX_GRID_Y, launch_grid

    assert launch_grid(70_000, 1000, 64) == (70_000, 16)
    assert launch_grid(1, 64 * MAX_GRID_Y, 64) == (1, MAX_GRID_Y)
    with pytest.raises(ValueError, match="at most 2\\^31 - 1 batch elements"):
        launch_grid(1, 64 * MAX_GRID_Y + 1, 64)


@NEEDS_TRITON
def test_batch_offsets_past_two_to_the_31_elements(tmp_path):
    """Forward and backward on inputs whose third batch element starts 2^31 + 2^11 elements
    into its buffer (4 GiB buffers, allocated lazily: ~0.4 GB touched), against float64. Run in
    a child process, so that a wrong address fails the test instead of crashing pytest. The
    interpreter computes offsets in 64 bits either way; that the compiled kernels do is
    checked in their IR (``test_aot_compile``) and, on a GPU, here (6 x 4 GiB of device
    memory)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import torch
        from perflab.implementations.attention import flash_triton as ft
        from perflab.implementations.attention.flash_tuning import pinned_config
        from perflab.implementations.attention.reference import naive_attention
        torch.manual_seed(0)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        batch, n, d = 3, 32, 16
        stride = 2**30 + 2**10
        def view():
            buf = torch.empty(stride * (batch - 1) + n * d, dtype=torch.float16, device=dev)
            return buf.as_strided((batch, n, d), (stride, d, 1))
        q, k, out, dq, dk, dv = (view() for _ in range(6))
        q.copy_(torch.randn(batch, n, d))
        k.copy_(torch.randn(batch, n, d))
        lse = torch.empty(batch, n, device=dev)
        with pinned_config():
            ft.launch_forward(q, k, k, out, lse, True)
        qs, ks, vs = (t.contiguous().cpu().double().requires_grad_() for t in (q, k, k))
        ref = naive_attention(qs, ks, vs, is_causal=True)
        ref.backward(q.contiguous().cpu().double())  # dO = q's values, read through its strides
        with pinned_config():
            ft.launch_backward(q, k, k, out, q, lse, dq, dk, dv, True)
        for got, want in ((out, ref), (dq, qs.grad), (dk, ks.grad), (dv, vs.grad)):
            assert (got.cpu().double() - want.detach()).abs().max() < 1e-2
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


@NEEDS_TRITON
def test_pinned_config_rejects_tiles_the_kernels_cannot_take():
    with pytest.raises(ValueError, match="tile sizes must be 16, 32, 64 or 128, got BQ=48"):
        with pinned_config((48, 64, 4, 2)):
            pass


@NEEDS_TRITON
def test_a_call_launches_its_kernels_and_nothing_else():
    """After the first call of a shape, a forward launches one kernel and a backward three
    (D = rowsum(dO * O), then dK and dV, then dQ); the only PyTorch operators outside the
    kernels are the allocations of their outputs (autograd's own ``detach`` of what it saves
    aside): no arithmetic, no float32 copies. The interpreter runs the same host code as a
    GPU, so this holds there too."""
    from perflab.bench.attention_timing import host_calls

    calls = host_calls(FlashAttentionTriton, *_inputs(2, 40, 56, 16, torch.float32, seed=5))
    assert calls["forward_launches"] == ["_flash_forward_kernel"]
    assert calls["forward_operators"] == ["empty_like", "empty"]  # the output and the L
    assert calls["backward_launches"] == [
        "_flash_backward_preprocess_kernel",
        "_flash_backward_kv_kernel",
        "_flash_backward_q_kernel",
    ]
    assert calls["backward_operators"] == ["empty_like"] * 4  # D, dQ, dK, dV
    tiled = host_calls(FlashAttentionTorch, *_inputs(2, 40, 56, 16, torch.float32, seed=5))
    assert tiled["forward_launches"] == [] and len(tiled["forward_operators"]) > 20


@NEEDS_TRITON
@pytest.mark.parametrize("batch, n_q, n_k, d, causal", CASES)
def test_the_plain_kernel_computes_what_the_lean_one_does(batch, n_q, n_k, d, causal):
    """The one-loop kernel notebook 06 compiles for contrast: the same function."""
    from perflab.implementations.attention.flash_triton_plain import plain_flash_forward

    q, k, v = (t.detach() for t in _inputs(batch, n_q, n_k, d, torch.float32, seed=n_q + n_k))
    out, lse = plain_flash_forward(q, k, v, causal)
    ref_out, ref_lse, _, _ = reference(q, k, v, causal)
    torch.testing.assert_close(out.double().cpu(), ref_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.double().cpu(), ref_lse, atol=2e-5, rtol=2e-5)


@NEEDS_TRITON
def test_a_compiled_model_runs_the_triton_attention_between_its_graphs():
    """The compile rung with FlashAttention in the stack: dynamo does not trace into the
    kernels' host code (on a GPU, the autotuner's prune step); the attention runs as it is,
    and the compiled model computes what the eager one does."""
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).to(DEVICE)
    model.set_attention(flash_attention_triton)
    tokens = torch.randint(10_000, (1, 40)).to(DEVICE)
    eager = model(tokens)
    try:
        explained = torch._dynamo.explain(model)(tokens)
        compiled = torch.compile(model)(tokens)
    finally:
        torch._dynamo.reset()
    assert explained.graph_break_count >= PRESETS["cpu-tiny"].num_layers  # one per attention
    assert any("disable" in str(reason.reason) for reason in explained.break_reasons)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


def test_a_pinned_check_runs_each_kernel_at_its_first_kept_configuration(monkeypatch):
    """On a GPU, ``pinned_config()`` runs each kernel at the first configuration
    ``flash_configs`` keeps for the launch's head dimension and element size (one the search
    compiled without a spill for every target), not one tile for all."""
    pytest.importorskip("triton")
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention import flash_tuning as tune
    from perflab.implementations.attention.flash_configs import kept_configs

    monkeypatch.setattr(tune, "INTERPRETED", False)  # the launch path a GPU takes
    with tune.pinned_config():
        for name, tuned in (("flash_forward", ft._forward), ("flash_backward_kv", ft._backward_kv)):
            for dtype, size in ((torch.float16, 2), (torch.float32, 4)):
                _, config = tune.kernel_and_config(tuned, name, 128, dtype)
                bq, bk, warps, stages = kept_configs(name, 128, size)[0]
                assert config == {"BQ": bq, "BK": bk, "num_warps": warps, "num_stages": stages}
    with tune.pinned_config((32, 32, 4, 2)):
        _, config = tune.kernel_and_config(ft._backward_q, "flash_backward_q", 64, torch.float16)
        assert config == {"BQ": 32, "BK": 32, "num_warps": 4, "num_stages": 2}


def _launch_arguments(monkeypatch, heads: int) -> list[dict]:
    """The named arguments of every kernel launch of a forward and backward at ``heads``
    (the batch of the (batch, seq, d) functions), captured in the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    from perflab.implementations.attention import flash_triton as ft

    launches, launch = [], InterpretedFunction.run

    def captured(self, *args, **kwargs):
        names = self.fn.__code__.co_varnames[: self.fn.__code__.co_argcount]
        named = dict(zip(names, args, strict=False))
        launches.append({"kernel": self.fn.__name__, **named, **kwargs})
        return launch(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", captured)
    q, k, v = (t.detach().requires_grad_() for t in _inputs(heads, 48, 48, 16, torch.float32, 7))
    ft.FlashAttentionTriton.apply(q, k, v, True).sum().backward()
    return launches


@pytest.mark.skipif(not INTERPRETED, reason="captures the interpreter's launches")
def test_the_autotuner_tunes_one_head_and_sixteen_apart(monkeypatch):
    """The autotuner's key (``AUTOTUNE_KEY``) holds the batch's bucket: a sweep that tuned at
    1 head does not run 16 heads on the tiles chosen for 1 (whose grid fills the GPU
    differently); 15 and 16 heads share a tuning."""
    from perflab.implementations.attention.flash_tuning import AUTOTUNE_KEY, batch_bucket

    def keys(heads):
        return {
            launch["kernel"]: tuple(launch[name] for name in AUTOTUNE_KEY)
            for launch in _launch_arguments(monkeypatch, heads)
            if launch["kernel"] != "_flash_backward_preprocess_kernel"
        }

    one, fifteen, sixteen = keys(1), keys(15), keys(16)
    assert set(one) == {
        "_flash_forward_kernel",
        "_flash_backward_kv_kernel",
        "_flash_backward_q_kernel",
    }
    for kernel in one:
        assert one[kernel] != sixteen[kernel]
        assert fifteen[kernel] == sixteen[kernel]
    assert [batch_bucket(b) for b in (1, 2, 3, 15, 16, 17)] == [1, 2, 4, 16, 16, 32]
    with pytest.raises(ValueError, match="batch must be at least 1"):
        batch_bucket(0)


@NEEDS_TRITON
@pytest.mark.parametrize("causal", [True, False])
def test_causal_programs_take_the_heaviest_query_tiles_first(causal):
    """In causal attention query tile t sees (t + 1) tiles of keys: the programs that start
    first (the lowest index on grid axis 1) take the last, heaviest tiles, so that the light
    ones fill the last wave; without a mask every tile is equal and the order stays."""
    tiles = 5
    out = torch.full((tiles,), -1, dtype=torch.int32, device=DEVICE)
    _which_tile[(1, tiles)](out, IS_CAUSAL=causal)
    expected = list(range(tiles))[::-1] if causal else list(range(tiles))
    assert out.tolist() == expected


@NEEDS_TRITON
def test_a_pinned_launch_asks_pytorch_for_nothing(monkeypatch):
    """Choosing a pinned configuration (a GPU's correctness checks) runs no aten operator on the
    host: ``host_calls`` would count one (a tensor made to read an element size calls
    ``lift_fresh``) against the launch's list of operators."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention import flash_tuning as tune

    class Operators(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(tune, "INTERPRETED", False)  # the launch path a GPU takes
    with tune.pinned_config(), Operators() as operators:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            tune.kernel_and_config(ft._forward, "flash_forward", 64, dtype)
    assert operators.seen == []


@NEEDS_TRITON
def test_one_kernel_pinned_the_others_at_their_first_kept(monkeypatch):
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention import flash_tuning as tune
    from perflab.implementations.attention.flash_configs import kept_configs

    monkeypatch.setattr(tune, "INTERPRETED", False)
    chosen = kept_configs("flash_backward_kv", 128, 2)[-1]
    with tune.pinned_config({"flash_backward_kv": chosen}):
        _, kv = tune.kernel_and_config(ft._backward_kv, "flash_backward_kv", 128, torch.bfloat16)
        _, fwd = tune.kernel_and_config(ft._forward, "flash_forward", 128, torch.bfloat16)
    assert (kv["BQ"], kv["BK"], kv["num_warps"], kv["num_stages"]) == chosen
    first = kept_configs("flash_forward", 128, 2)[0]
    assert (fwd["BQ"], fwd["BK"], fwd["num_warps"], fwd["num_stages"]) == first
    with pytest.raises(ValueError, match="unknown kernels \\['flash_sideways'\\]; valid: flash_"):
        with tune.pinned_config({"flash_sideways": chosen}):
            pass


@NEEDS_TRITON
def test_config_check_runs_each_job_and_counts_the_configurations():
    """The check a GPU runs over every kept configuration, here on this device (in the
    interpreter every job runs 16 x 16 tiles, and the line says so)."""
    from perflab.tools.kernel_configs import check_configs, config_check_line, config_jobs

    jobs = config_jobs(dtypes=["float32"], head_dims=[16])
    assert {job.kernel for job in jobs} == {
        "flash_forward",
        "flash_backward_kv",
        "flash_backward_q",
    }
    assert all(job.config in kept_configs(job.kernel, 16, 4) for job in jobs)
    table = check_configs(jobs[:1], str(DEVICE))
    assert len(table) == 3 and table["within_tolerance"].all()  # three cases
    if not torch.cuda.is_available():  # the spawned workers' path, as a GPU runs it
        spawned = check_configs(jobs[:2], "cpu", workers=2)
        assert len(spawned) == 6 and spawned["within_tolerance"].all()
    assert table["tiles_pinned"].all() == (not INTERPRETED)
    if INTERPRETED:
        assert table["launched_as_pinned"].isna().all()  # fixed tiles: nothing pinned to show
    line = config_check_line(table)
    assert line.startswith("1 of 1 kernel configurations within tolerance on every case")
    broken = table.assign(within_tolerance=[True, False, True])
    assert "0 of 1" in config_check_line(broken) and "failed: flash_forward" in (
        config_check_line(broken)
    )
    too_big = table.assign(fits=False, within_tolerance=False)
    assert config_check_line(too_big).endswith("; 1 do not fit this GPU's shared memory")


@GPU
def test_autotuned_choices_are_keyed_by_batch_bucket_on_gpu():
    """On a GPU the autotuner itself holds one choice per bucket (not pinned: "autotuned" is in
    the name, see the fixture above): its cache keys, in the order of ``AUTOTUNE_KEY`` (Triton
    appends the dtypes), differ in the bucket."""
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention.flash_tuning import AUTOTUNE_KEY

    for heads in (1, 16):
        q, k, v = _inputs(heads, 256, 256, 64, torch.float16, seed=heads)
        ft.FlashAttentionTriton.apply(q, k, v, True).sum().backward()
    for tuned in (ft._forward, ft._backward_kv, ft._backward_q):
        keys = [key for key in tuned.cache if key[:2] == (256, 256) and key[2] == 64]
        named = [dict(zip(AUTOTUNE_KEY, key, strict=False)) for key in keys]
        assert {n["BATCH_BUCKET"] for n in named} >= {1, 16}
        assert all(n["IS_CAUSAL"] is True for n in named)


def test_a_pinned_launch_is_recorded_with_the_configuration_it_runs(monkeypatch):
    """Compiled (not interpreted), a pinned kernel launches with the job's tiles, the others
    with their first kept configuration, and ``recorded_launches`` sees each: what the GPU
    check holds ``launched_as_pinned`` to (the launch itself faked: no GPU here)."""
    from perflab.implementations.attention import flash_tuning as tune

    monkeypatch.setattr(tune, "INTERPRETED", False)
    tuned = type("Tuned", (), {"fn": "the jit function"})()
    config = kept_configs("flash_forward", 64, 2)[-1]
    with tune.pinned_config({"flash_forward": config}):
        with tune.recorded_launches() as launches:
            kernel, args = tune.kernel_and_config(tuned, "flash_forward", 64, torch.bfloat16)
            tune.kernel_and_config(tuned, "flash_backward_q", 64, torch.bfloat16)
    assert kernel == "the jit function" and (args["BQ"], args["BK"]) == config[:2]
    assert launches == [
        ("flash_forward", config),
        ("flash_backward_q", kept_configs("flash_backward_q", 64, 2)[0]),
    ]
    assert tune._launches is None  # recording ends with the block
