"""``perflab check --adapters``: perflab's own adapters (``perflab.cs336``) pass every check,
and a copy with one planted bug per adapter (tests/fixtures/buggy_adapters.py, its docstring
names them) fails exactly where the bugs are. The course's own tests call the adapters the
same way (spawned Gloo ranks, whole batch against halves); ``distributed_checks`` follows
their call patterns."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from perflab.measure.device import triton_available
from perflab.tools.adapters import AdapterLoadError, check_adapters, load_adapters, passed
from perflab.tools.adapters.loading import ADAPTER_NAMES

FIXTURES = Path(__file__).parent / "fixtures"
BUGGY = str(FIXTURES / "buggy_adapters.py")
HAVE_TRITON = triton_available()
NEEDS_TRITON = pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed (Linux-only)")


def perflab_cli(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "perflab", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture(scope="module")
def own_table():
    return check_adapters("perflab.cs336")


@pytest.fixture(scope="module")
def buggy_table():
    return check_adapters(BUGGY)


def status_of(table, adapter, check_part=""):
    rows = table[(table.adapter == adapter) & table.check.str.contains(check_part, regex=False)]
    assert len(rows), f"no row for {adapter} {check_part!r}"
    return set(rows.status)


def test_perflab_cs336_defines_every_adapter_of_both_years():
    import perflab.cs336 as cs336

    assert set(cs336.__all__) == set(ADAPTER_NAMES)
    assert all(callable(getattr(cs336, name)) for name in ADAPTER_NAMES)


def test_perflab_own_adapters_pass_everything(own_table):
    # Without Triton its adapter is listed as skipped, and nothing is compiled.
    failing = own_table[~own_table.status.isin(["pass"] if HAVE_TRITON else ["pass", "skipped"])]
    assert failing.empty, failing.to_string()
    assert passed(own_table)
    checked = set(own_table.adapter)
    for getter in (
        "get_ddp",
        "get_ddp_individual_parameters",
        "get_ddp_bucketed",
        "get_fsdp",
        "get_sharded_optimizer",
        "get_flashattention_autograd_function_pytorch",
        "get_flashattention_autograd_function_triton",
    ):
        assert getter in checked
    compiled = own_table[own_table.check.str.startswith("compiles for")]
    if not HAVE_TRITON:
        assert compiled.empty
        return
    assert {"compiles for sm_80 (A100)", "compiles for sm_90 (H100)"} <= set(compiled.check)
    assert compiled.adapter.str.contains("_flash_backward_q_kernel").any()


@pytest.mark.parametrize(
    "adapter, check_part",
    [
        ("get_flashattention_autograd_function_pytorch", "log-sum-exp"),
        ("get_ddp", "(fp32)"),
        ("get_ddp", "(accumulation, no_sync)"),
        ("get_fsdp", "(fp32)"),
        ("get_fsdp", "fp16 compute, fp32 master"),
        ("get_fsdp", "gradients fp32"),
        ("get_sharded_optimizer", "AdamW vs unsharded"),
        ("get_sharded_optimizer", "round trip"),
        pytest.param("deep_pipeline_kernel (buggy_kernels)", "sm_90", marks=NEEDS_TRITON),
        pytest.param("deep_pipeline_kernel (buggy_kernels)", "sm_80", marks=NEEDS_TRITON),
    ],
)
def test_each_planted_bug_fails(buggy_table, adapter, check_part):
    assert status_of(buggy_table, adapter, check_part) == {"fail"}


def test_an_adapter_that_raises_is_an_error_not_a_pass(buggy_table):
    # The bucketed wrapper's after-backward adapter never waits: the next backward raises.
    assert status_of(buggy_table, "get_ddp_bucketed") == {"error"}


def test_correct_parts_of_a_buggy_file_still_pass(buggy_table):
    assert status_of(buggy_table, "get_flashattention_autograd_function_pytorch", "output") == {
        "pass"
    }
    if HAVE_TRITON:
        assert status_of(buggy_table, "get_flashattention_autograd_function_triton", "dQ") == {
            "pass"
        }
    assert not passed(buggy_table)


def test_not_implemented_is_listed_as_not_provided(buggy_table):
    assert status_of(buggy_table, "get_ddp_individual_parameters") == {"not provided"}


def test_the_course_template_provides_nothing_and_does_not_pass(tmp_path):
    template = tmp_path / "adapters.py"
    template.write_text(
        "def get_flashattention_autograd_function_pytorch():\n    raise NotImplementedError\n"
        "def get_sharded_optimizer(params, optimizer_cls, **kwargs):\n"
        "    raise NotImplementedError\n"
    )
    table = check_adapters(str(template), parts=("attention", "optimizer"))
    assert set(table.status) <= {"not provided", "skipped"}
    assert not passed(table)  # nothing was measured


def test_a_package_adapters_file_imports_with_its_relative_imports(tmp_path):
    package = tmp_path / "course_tests_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("from perflab.cs336 import *  # noqa\n")
    (package / "adapters.py").write_text("from .helpers import *  # noqa\n")
    module = load_adapters(str(package / "adapters.py"))
    assert module.__name__ == "course_tests_pkg.adapters"
    assert callable(module.get_fsdp)


def test_an_edited_adapters_file_or_implementation_is_imported_again(tmp_path):
    """A notebook or session that loads the adapters again after the student edited them gets
    the new code (whose hash names its results), whether the edit was to the adapters file or
    to the module it imports (each edit names a new results folder); an edit that keeps the
    file's size within the same second (which Python's bytecode cache would not notice)
    included; an unchanged tree is not re-imported."""
    from perflab.tools.adapters.loading import results_name

    root = tmp_path / "edited_checkout"
    tests, impl = root / "edited_tests", root / "edited_impl"
    for package in (tests, impl):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
    (impl / "kernel.py").write_text("SPEED = 1\n")
    adapters = tests / "adapters.py"
    adapters.write_text("from edited_impl.kernel import SPEED\nVERSION = 1\n")
    first = load_adapters(str(adapters))
    name = results_name(str(adapters))
    assert (first.VERSION, first.SPEED) == (1, 1)
    assert load_adapters(str(adapters)) is first  # nothing changed: the same module

    adapters.write_text("from edited_impl.kernel import SPEED\nVERSION = 2\n")
    second = load_adapters(str(adapters))
    assert (second.VERSION, second.SPEED) == (2, 1)
    assert results_name(str(adapters)) != name
    name = results_name(str(adapters))
    (impl / "kernel.py").write_text("SPEED = 2\n")  # same size, likely the same second
    assert load_adapters(str(adapters)).SPEED == 2
    assert results_name(str(adapters)) != name  # the kernel's edit names a new folder too
    (impl / "kernel.py").write_text("SPEED = 1\n")  # undone: the name follows the content
    assert load_adapters(str(adapters)).SPEED == 1
    assert results_name(str(adapters)) == name


@pytest.mark.parametrize(
    "spec, message",
    [
        ("/nonexistent/adapters.py", "no adapters file at /nonexistent/adapters.py"),
        ("no_such_package_zz.adapters", "cannot import adapters module 'no_such_package_zz"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(AdapterLoadError, match=message):
        load_adapters(spec)


def test_cli_import_error_is_one_line_naming_the_file(tmp_path):
    broken = tmp_path / "adapters.py"
    broken.write_text("import not_a_module_zz\n")
    done = perflab_cli("check", "--adapters", str(broken))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"perflab check: cannot import {broken}: ModuleNotFoundError: "
        "No module named 'not_a_module_zz'"
    )


def test_cli_exit_status_follows_the_table(tmp_path):
    # --details: the whole table as markdown, however narrow the terminal
    good = perflab_cli(
        "check",
        "--adapters",
        "perflab.cs336",
        "--parts",
        "optimizer",
        "--details",
        env={"COLUMNS": "40"},
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines()[-1] == "3 pass; 0 finding(s) beyond the handout"
    # the markdown header row; a table fitted to the terminal starts with the adapter's name
    assert good.stdout.splitlines()[0].startswith("| adapter ")
    bad = perflab_cli(
        "check", "--adapters", BUGGY, "--parts", "optimizer", cwd=tmp_path, env={"COLUMNS": "90"}
    )
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[-1] == "3 fail; 2 finding(s) beyond the handout"
    # fitted to the terminal: the adapter's name above its rows, the details as notes below
    lines = bad.stdout.splitlines()
    assert max(map(len, lines)) <= 90, bad.stdout
    assert lines[0] == "get_sharded_optimizer"
    assert any(line.startswith("[2] fails on 4 ranks although it passes on 2") for line in lines)
    assert not list(tmp_path.iterdir())  # nothing written where it ran


def test_a_handout_adapter_not_provided_fails_the_check_and_is_named(tmp_path):
    """The course's tests fail on an adapter that raises NotImplementedError: so does the
    check's exit status, naming it; ``--parts`` leaves out what is not done yet."""
    from perflab.tools.adapters import missing_adapters

    adapters = tmp_path / "half_done_adapters.py"
    adapters.write_text(
        "from perflab.cs336 import get_flashattention_autograd_function_pytorch  # noqa\n\n\n"
        "def get_sharded_optimizer(params, optimizer_cls, **kwargs):\n"
        "    raise NotImplementedError\n"
    )
    table = check_adapters(str(adapters), parts=("pytorch", "optimizer"))
    assert missing_adapters(table) == ["get_sharded_optimizer"] and not passed(table)
    both = perflab_cli("check", "--adapters", str(adapters), "--parts", "pytorch", "optimizer")
    assert both.returncode == 1, both.stdout + both.stderr
    assert both.stdout.splitlines()[-1].startswith(
        "not provided: get_sharded_optimizer: the course's tests fail on each"
    )
    done = perflab_cli("check", "--adapters", str(adapters), "--parts", "pytorch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not provided" not in done.stdout


@pytest.mark.skipif(not HAVE_TRITON or torch.cuda.is_available(), reason="a CPU with Triton")
def test_a_cuda_only_triton_adapter_needs_a_gpu_and_the_check_passes():
    """Its own message ("must be on a CUDA device") is read as a CPU limit: every Triton row is
    "needs a GPU", the compile check says no kernel launched to compile, and the exit status
    stays 0, as the course's tests skip the Triton cases without a GPU."""
    table = check_adapters(
        str(FIXTURES / "cuda_only_adapters.py"), parts=("pytorch", "triton", "kernels")
    )
    triton = table[table.adapter == "get_flashattention_autograd_function_triton"]
    assert set(triton.status) == {"needs a GPU"}, triton.to_string()
    assert triton.detail.str.startswith("the code refuses CPU tensors").all()
    (compiled,) = table[table.adapter == "triton kernels"].itertuples()
    assert compiled.status == "needs a GPU"
    assert compiled.detail.startswith("no kernel launched here, so none could be compiled")
    assert passed(table), table.to_string()
    # the Triton parts alone: every row needs a GPU, and the course's tests would skip them all
    alone = table[table.adapter != "get_flashattention_autograd_function_pytorch"]
    assert passed(alone) and not passed(alone.assign(status="skipped"))


@pytest.mark.skipif(not HAVE_TRITON or torch.cuda.is_available(), reason="the interpreter")
def test_a_kernel_that_crashes_the_interpreter_costs_only_its_own_cases():
    """Its ragged cases kill the interpreter (SIGSEGV); the handout's cases still pass, each
    crashed case is an error row naming the signal and what it means, and the table comes."""
    table = check_adapters(str(FIXTURES / "crashing_kernel_adapters.py"), parts=("triton",))
    handout = table[table.scope == "handout"]
    assert set(handout.status) == {"pass"}, handout.to_string()
    crashed = table[table.status == "error"]
    assert set(crashed.case) == {"2x65x65x32 causal", "1x37x91x16", "3x50x50x16 causal"}
    assert crashed.detail.str.startswith(
        "the Triton interpreter crashed on this case (SIGSEGV): a load or store outside"
    ).all(), crashed.detail.tolist()


def test_a_check_that_raises_in_a_launch_costs_one_relaunch_of_the_others():
    """The state_dict round trip raises on both ranks: that launch ends naming it, its row
    comes from its traceback (file and line, why it matters), and the other checks of the
    launch run again together, once, not each alone; the handout's checks still pass."""
    said = []
    table = check_adapters(
        str(FIXTURES / "raising_state_dict_optimizer_adapters.py"),
        parts=("optimizer",),
        progress=said.append,
    )
    assert passed(table), table.to_string()
    (raised,) = table[table.status == "error"].itertuples()
    assert "RuntimeError: checkpoints are not supported yet" in raised.detail
    assert "(raising_state_dict_optimizer_adapters.py:" in raised.detail
    assert "perflab check" not in raised.detail
    assert raised.detail.startswith("training resumed from a checkpoint")  # why it matters
    assert not any("(alone)" in line for line in said), said
    assert sum("run again together" in line for line in said) == 1, said  # 2 ranks only


def test_every_half_batch_order_is_the_whole_batch_to_rounding():
    """The bitwise question's table: each way of combining two half-batch gradients is the
    whole batch's gradient to float32 rounding (a wrong scaling, a quarter or twice the mean,
    would be off by the gradient's own size). Whether any is bitwise equal depends on the BLAS,
    so that is printed, not asserted."""
    from perflab.tools.adapters.bitwise import half_batch_orders

    table = half_batch_orders()
    assert len(table) == 5 and (table.parameters == 6).all()
    assert (table.max_difference < 1e-6).all(), table.to_string()


def test_results_name_and_added_implementations():
    from perflab.bench.attention_timing import add_implementation, get_implementation, interpreted
    from perflab.tools.adapters import results_name

    assert results_name("perflab.cs336").startswith("yours-perflab-cs336-")
    with pytest.raises(ValueError, match="'sdpa' is one of perflab's implementations"):
        add_implementation("sdpa", object)
    from perflab.implementations.attention import FlashAttentionTorch

    add_implementation("yours_test_only", FlashAttentionTorch)
    assert not interpreted("yours_test_only")
    q = torch.randn(1, 5, 16)
    torch.testing.assert_close(
        get_implementation("yours_test_only")(q, q, q, True),
        FlashAttentionTorch.apply(q, q, q, True),
    )


def test_a_package_name_taken_by_another_folder_still_imports_with_relative_imports(tmp_path):
    for which in ("first", "second"):
        package = tmp_path / which / "course_tests_twin"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "helpers.py").write_text(f"WHICH = {which!r}\n")
        (package / "adapters.py").write_text("from .helpers import WHICH  # noqa\n")
    first = load_adapters(str(tmp_path / "first" / "course_tests_twin" / "adapters.py"))
    second = load_adapters(str(tmp_path / "second" / "course_tests_twin" / "adapters.py"))
    assert (first.WHICH, second.WHICH) == ("first", "second")
    assert second.__name__.startswith("_perflab_adapters_")


def test_a_missing_gradient_fails_where_max_would_have_passed_it(tmp_path):
    adapters = tmp_path / "adapters.py"
    adapters.write_text(
        "from perflab.implementations.attention import FlashAttentionTorch\n\n\n"
        "class NoKeyGradient(FlashAttentionTorch):\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_out):\n"
        "        dq, dk, dv, _ = FlashAttentionTorch.backward(ctx, grad_out)\n"
        "        return dq, None, dv, None\n\n\n"
        "def get_flashattention_autograd_function_pytorch():\n"
        "    return NoKeyGradient\n"
    )
    table = check_adapters(str(adapters), parts=("attention",))
    row = table[table.check.str.startswith("backward")].iloc[0]
    assert row.status == "fail" and "got no gradient" in row.detail


@NEEDS_TRITON
def test_kernels_alone_compile_launches_with_default_and_dtype_constexprs(tmp_path):
    """``--parts kernels`` runs the Triton adapter to record its launches; a constexpr left at
    its default and one that is a Triton dtype are compiled as launched."""
    (tmp_path / "adapters.py").write_text(
        "import torch\nimport triton\nimport triton.language as tl\n\n"
        "from perflab.cs336 import get_flashattention_autograd_function_triton as _theirs\n\n\n"
        "@triton.jit\n"
        "def cast_kernel(X, Y, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr = 16):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(Y + offs, tl.load(X + offs).to(OUT_DTYPE))\n\n\n"
        "class WithCast(_theirs()):\n"
        "    @staticmethod\n"
        "    def forward(ctx, q, k, v, is_causal=False):\n"
        "        x = torch.ones(16)\n"
        "        cast_kernel[(1,)](x, torch.empty(16, dtype=torch.float16), tl.float16)\n"
        "        return _theirs().forward(ctx, q, k, v, is_causal)\n\n\n"
        "def get_flashattention_autograd_function_triton():\n"
        "    return WithCast\n"
    )
    table = check_adapters(str(tmp_path / "adapters.py"), parts=("kernels",))
    cast = table[table.adapter.str.startswith("cast_kernel")]
    assert list(cast.status) == ["pass", "pass"], cast.to_string()
    assert cast.detail.str.contains("OUT_DTYPE=fp16, BLOCK=16").all()


def _course_checkout(root, body: str):
    tests = root / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "adapters.py").write_text(body)
    return str(tests / "adapters.py")


def test_each_implementation_and_version_gets_its_own_results_folder(tmp_path):
    """Named after the checkout's folder and the adapters file's hash: two students' (or two
    versions of one) ``tests/adapters.py`` no longer share ``yours-tests-adapters``."""
    from perflab.tools.adapters import results_name

    body = "from perflab.cs336 import get_sharded_optimizer  # noqa\n"
    alice = results_name(_course_checkout(tmp_path / "alice-a2", body))
    bob = results_name(_course_checkout(tmp_path / "bob_a2", body))
    bob_later = results_name(_course_checkout(tmp_path / "later" / "bob_a2", body + "# v2\n"))
    assert alice.startswith("yours-alice-a2-") and bob.startswith("yours-bob-a2-")
    assert alice.rsplit("-", 1)[1] == bob.rsplit("-", 1)[1]  # the same file, hashed alike
    assert len({alice, bob, bob_later}) == 3
    done = perflab_cli(
        "check",
        "--adapters",
        str(tmp_path / "alice-a2" / "tests" / "adapters.py"),
        "--parts",
        "optimizer",
    )
    from perflab.measure.paths import data_dir

    where = f"{data_dir().resolve() / 'results'}/<notebook>/{alice}/"  # a full path
    assert where.startswith("/") and where in done.stderr.splitlines()[0]


def test_only_the_adapters_of_the_files_year_are_listed(tmp_path):
    """A 2025 checkout (its DDP adapters are 2025's) gets no rows for 2026's get_ddp and
    get_fsdp, not even "not provided"."""
    body = (
        "def get_ddp_individual_parameters(module):\n    raise NotImplementedError\n"
        "def get_sharded_optimizer(params, cls, **kw):\n    raise NotImplementedError\n"
    )
    table = check_adapters(_course_checkout(tmp_path / "a2-2025", body), parts=("ddp", "fsdp"))
    assert set(table.adapter) == {"get_ddp_individual_parameters", "get_ddp_bucketed"}
    assert set(table.status) == {"not provided"} and len(table) == 2  # one row each


@NEEDS_TRITON
def test_a_block_pointer_kernel_passes_in_the_interpreter_and_compiles():
    """The handouts teach block pointers: under the pinned Triton they run interpreted and
    compile for sm_80 and sm_90 (Triton 3.9 removed them; 3.8's interpreter breaks
    ``.advance()``)."""
    table = check_adapters(str(FIXTURES / "block_pointer_adapters.py"), parts=("triton", "kernels"))
    assert set(table.status) == {"pass"}, table.to_string()
    compiled = table[table.check.str.startswith("compiles for")]
    assert set(compiled.check) == {"compiles for sm_80 (A100)", "compiles for sm_90 (H100)"}
    assert compiled.adapter.str.contains("block_pointer_forward_kernel").all()


def test_an_in_spec_implementation_that_ignores_is_causal_passes_with_findings(tmp_path):
    """The handout lets the PyTorch version ignore is_causal and leave its backward for later:
    exit status 0, its causal cases listed as findings (with why they matter), its backward as
    not provided; ``--strict`` counts the findings."""
    from perflab.tools.adapters import findings

    spec = str(FIXTURES / "causal_ignored_adapters.py")
    table = check_adapters(spec, parts=("pytorch",))
    assert passed(table) and not passed(table, strict=True)
    handout = table[table.scope == "handout"]
    forward = handout[handout.check.str.startswith("forward")]
    assert set(forward.status) == {"pass"}
    assert set(handout[handout.check.str.startswith("backward")].status) == {"not provided"}
    found = findings(table)
    assert set(found.case) == {"2x64x64x32 causal", "2x65x65x32 causal", "3x50x50x16 causal"}
    assert found.detail.str.startswith("is_causal ignored or wrong").all()
    done = perflab_cli("check", "--adapters", spec, "--parts", "pytorch")
    assert done.returncode == 0 and "6 finding(s) beyond the handout" in done.stdout
    strict = perflab_cli("check", "--adapters", spec, "--parts", "pytorch", "--strict")
    assert strict.returncode == 1


def test_an_attention_that_ignores_is_causal_is_timed_with_a_caveat(tmp_path):
    """Notebooks 05 and 06 time it (it passes the handout), saying that its causal times are
    of attention without the mask."""
    from perflab.tools.adapters.timing import attention_of_yours

    spec = str(FIXTURES / "causal_ignored_adapters.py")
    passing, lines = attention_of_yours(spec, tmp_path, {}, torch.device("cpu"), parts=("pytorch",))
    assert set(passing) == {"yours_pytorch"}
    assert lines[-1] == (
        "yours_pytorch ignores is_causal (the finding above): its times in a causal sweep are of "
        "attention without the mask, not of causal attention"
    )
    _, own = attention_of_yours("perflab.cs336", tmp_path, {}, torch.device("cpu"),
                                parts=("pytorch",))  # fmt: skip
    assert not any("ignores is_causal" in line for line in own)


def test_errors_say_what_went_wrong_where_and_cpu_limits_need_a_gpu():
    """A torch.compile error shows dynamo's own reason and the line of the student's file, not
    the "Set TORCHDYNAMO_VERBOSE=1" boilerplate; ``assert q.is_cuda`` on a CPU is "needs a
    GPU", which does not fail the check."""
    table = check_adapters(str(FIXTURES / "cpu_limits_adapters.py"), parts=("pytorch", "triton"))
    pytorch = table[table.adapter == "get_flashattention_autograd_function_pytorch"]
    assert set(pytorch.status) == {"error"}
    detail = pytorch.detail.iloc[0]
    assert detail.startswith("Unsupported: Data-dependent branching")
    fixture = (FIXTURES / "cpu_limits_adapters.py").read_text().splitlines()
    branch = 1 + next(i for i, line in enumerate(fixture) if "if scores.sum() > 0" in line)
    check = 1 + next(i for i, line in enumerate(fixture) if "assert q.is_cuda" in line)
    assert detail.endswith(f"(cpu_limits_adapters.py:{branch})") and "TORCHDYNAMO" not in detail
    if HAVE_TRITON and not torch.cuda.is_available():  # on a GPU its tensors are CUDA's
        gpu = table[table.adapter == "get_flashattention_autograd_function_triton"]
        assert set(gpu.status) == {"needs a GPU"}
        assert gpu.detail.iloc[0] == (
            'the code requires CUDA tensors: `assert q.is_cuda, "Expected CUDA tensors"` '
            f"(cpu_limits_adapters.py:{check})"
        )


@pytest.mark.parametrize(
    "fixture, finding",
    [
        ("inner_state_optimizer_adapters.py", "state_dict() holds no optimizer state"),
        ("two_ranks_optimizer_adapters.py", "fails on 4 ranks although it passes on 2"),
    ],
)
def test_sharded_optimizer_findings_beyond_the_handout(fixture, finding):
    """Both pass the handout's test (exit status 0); the inner optimizer's state is missing
    from a checkpoint, the two-rank one breaks on four ranks: each a finding that says so."""
    from perflab.tools.adapters import findings

    table = check_adapters(str(FIXTURES / fixture), parts=("optimizer",))
    assert passed(table), table.to_string()
    assert table[table.scope == "handout"].status.tolist() == ["pass"]
    assert findings(table).detail.str.startswith(finding).any(), table.to_string()


def test_numbers_keep_their_format_and_units():
    """Errors in scientific notation as written, shared memory in KiB (the table writer once
    parsed '1.7e+05' back into 170000 under "tolerance")."""
    from perflab.tools.adapters import format_table

    table = pd.DataFrame(
        [
            {
                "adapter": "k",
                "check": "compiles for sm_90 (H100)",
                "error": 166912.0,
                "tolerance": 232448.0,
                "status": "pass",
            },
            {
                "adapter": "a",
                "check": "forward: output vs float64",
                "error": 2e35,
                "tolerance": 2e-5,
                "status": "fail",
            },
        ]
    )
    text = format_table(table)
    assert "163.0 KiB" in text and "227.0 KiB" in text
    assert "2.0e+35" in text and "2.0e-05" in text and "170000" not in text


def test_results_name_tells_a_model_class_from_a_windows_path(monkeypatch):
    """``package.module:Class`` (notebook 01's model) is named by the spec and its module's
    file; ``C:\\...\\adapters.py`` is an adapters path, not a class."""
    from perflab.tools.adapters import loading

    name = loading.results_name("perflab.implementations.model:TransformerLM")
    assert name.startswith("yours-perflab-implementations-model-transformerlm-")
    assert len(name.split("-")[-1]) == 8
    asked = []
    monkeypatch.setattr(loading, "load_adapters", lambda spec: asked.append(spec) or loading)
    monkeypatch.setattr(loading, "student_root", lambda module: None)
    loading.results_name("C:\\Users\\me\\a2\\tests\\adapters.py")
    assert asked == ["C:\\Users\\me\\a2\\tests\\adapters.py"]


def test_the_summary_says_what_happened_per_adapter():
    """Two passes and a skip are a pass with one not run (once called "skipped"); a failure
    wins; with nothing passed, the reason none ran."""
    from perflab.tools.adapters import summary

    table = pd.DataFrame(
        {
            "adapter": ["a", "a", "a", "b", "b", "c", "c"],
            "scope": ["handout"] * 7,
            "status": ["pass", "pass", "skipped", "pass", "fail", "needs a GPU", "skipped"],
        }
    )
    rows = summary(table).set_index("adapter")
    assert rows.loc["a", ["passed", "failed", "not run", "status"]].tolist() == [2, 0, 1, "pass"]
    assert rows.loc["b", "status"] == "fail" and rows.loc["c", "status"] == "needs a GPU"


def test_triton_35s_interpreter_with_numpy_24_is_the_environments_problem(monkeypatch):
    """torch 2.9 (the 2025 course) brings Triton 3.5, whose interpreter fails under numpy 2.4
    whatever the kernel: the Triton cases are skipped with why and the fix, not graded."""
    from perflab.tools.adapters import battery

    assert battery.interpreter_problem("3.7.1", "2.4.6") is None
    assert battery.interpreter_problem("3.5.1", "2.3.5") is None
    assert battery.interpreter_problem(None, "2.4.6") is None
    monkeypatch.setattr(battery, "_installed", lambda *names: ["3.5.1", "2.4.6"])
    table = check_adapters("perflab.cs336", parts=("triton",), device="cpu")
    (row,) = table.itertuples()
    assert (row.adapter, row.status) == ("get_flashattention_autograd_function_triton", "skipped")
    assert row.detail.startswith("not run: the Triton interpreter of Triton 3.5.1 fails with")
    assert "pip install 'numpy<2.4'" in row.detail and not passed(table)
