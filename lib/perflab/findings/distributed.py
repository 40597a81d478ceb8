"""What notebooks 07 and 08's measurements and models say, as tables of checks and sentences
computed from their numbers.

Each function reads what ``perflab.distributed`` returned (ZeRO's and FSDP's parity rows, the
memory each rank holds, the step timings, the gathers' timeline, the calculators and the
handouts' accounting) and returns the checks or sentences the notebook prints; they are
tested on small frames (``tests/test_distributed_findings.py``).
"""

from __future__ import annotations

import pandas as pd
import torch

import perflab.distributed.ffn_calcs as ffn_symbols
from perflab.distributed.calculators import (
    STRATEGIES,
    Hardware,
    Workload,
    estimate,
    max_compute_bound_devices,
)
from perflab.distributed.comm_accounting import (
    H100_80GB,
    HANDOUT_MESH,
    TPU_V5P,
    XXL,
    Accelerator,
    devices_needed,
    mesh_batch,
    min_fsdp_devices,
    training_state_bytes,
)
from perflab.distributed.ddp_benchmark import DDP_COLLECTIVES, round_seconds
from perflab.distributed.ffn_calcs import tp_backward
from perflab.distributed.launch import max_world_size, place_ranks
from perflab.measure.comparison import Comparison, band_edges, paired_comparison
from perflab.measure.conclusions import Finding
from perflab.measure.stats import level_text, outward

MiB = 2**20


def placement_line(world_size: int, memory_model: str) -> str:
    """Where the ranks run for the memory measurements and for the timed ZeRO step."""
    return (
        f"{world_size} ranks, memory measured on {memory_model}: "
        f"{place_ranks(world_size).describe()}; the ZeRO step timing: "
        f"{place_ranks(world_size, DDP_COLLECTIVES).describe()}"
    )


def zero_parity_checks(zero: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer and rank of ``zero_parity_all``: the sharded optimizer matches one process
    (to 1e-10 in float64), every rank holds the same parameters, and the state is smaller."""
    return zero.assign(
        matches_one_process=zero["max_param_diff"] < 1e-10,
        same_params_on_all_ranks=zero["param_spread_across_ranks"] == 0,
        state_smaller=zero["sharded_state_bytes"] < zero["unsharded_state_bytes"],
    )[
        [
            "optimizer",
            "rank",
            "groups",
            "matches_one_process",
            "same_params_on_all_ranks",
            "state_smaller",
        ]
    ]


def zero_memory_lines(zero_mem: pd.DataFrame) -> list[str]:
    """``zero_memory``'s measured state against the formula, sharded and not, and the shards
    against the whole."""
    same = {
        kind: bool((zero_mem[f"state_measured_{kind}"] == zero_mem[f"state_computed_{kind}"]).all())
        for kind in ("sharded", "unsharded")
    }
    whole = int(zero_mem["state_measured_unsharded"].iloc[0])
    return [
        f"measured == computed, sharded: {same['sharded']}",
        f"measured == computed, unsharded: {same['unsharded']}",
        "shards add up to the unsharded state: "
        f"{int(zero_mem['state_measured_sharded'].sum()) == whole}",
    ]


def zero_state_sentence(zero_mem: pd.DataFrame, model: str, world_size: int) -> str:
    """AdamW's state per rank, unsharded and on the fuller rank, against the ideal 1/N."""
    whole = zero_mem["state_measured_unsharded"].iloc[0]
    fullest = zero_mem["state_measured_sharded"].max()
    return (
        f"{model}: {zero_mem['parameters'].iloc[0] / 1e6:.2f} M parameters; AdamW state per rank "
        f"{whole / MiB:.1f} MiB unsharded, {fullest / MiB:.1f} MiB on the fuller rank "
        f"({fullest / whole:.2f}x; the ideal is 1/{world_size})"
    )


def memory_point_lines(points: pd.DataFrame, zero_mem: pd.DataFrame) -> list[str]:
    """``zero_memory_points`` held to the accounting: parameters 4 P bytes throughout, gradients
    4 P from backward on, the state after the step that of section 1, nothing else growing."""
    params = int(zero_mem["parameters"].iloc[0])
    held = points.set_index(["rank", "optimizer", "point"])
    after_init = held.xs("after init", level="point")["gradient_bytes"]
    later = points.loc[points["point"] != "after init", "gradient_bytes"]
    after = held.xs("after step", level="point")

    def state(optimizer: str, column: str) -> bool:
        measured = after.xs(optimizer, level="optimizer")["optimizer_state_bytes"].to_numpy()
        return bool((measured == zero_mem[column].to_numpy()).all())

    states = state("AdamW", "state_measured_unsharded") and state(
        "sharded AdamW", "state_measured_sharded"
    )

    return [
        "parameters = 4 P bytes at every point: "
        f"{bool((points['parameter_bytes'] == 4 * params).all())}",
        "gradients = 4 P bytes from backward on: "
        f"{bool((after_init == 0).all() and (later == 4 * params).all())}",
        f"state after the step = the measured state of section 1: {states}",
        "nothing else grows between the points: "
        f"{bool(points.groupby(['rank', 'optimizer'])['other_bytes'].nunique().eq(1).all())}",
    ]


def rank0_sentence(points: pd.DataFrame, world_size: int) -> str:
    """Rank 0 after the step, with and without sharding: what it holds and what the peak so far
    drops by, against the state it no longer keeps."""
    rank0 = points[points["rank"] == 0].set_index(["optimizer", "point"])
    final = rank0.xs("after step", level="point")
    plain, sharded = final.loc["AdamW"], final.loc["sharded AdamW"]
    dropped = plain["peak_bytes_so_far"] - sharded["peak_bytes_so_far"]
    state = plain["optimizer_state_bytes"] - sharded["optimizer_state_bytes"]
    return (
        f"Rank 0 of {world_size}: after the step it holds {plain['allocated_bytes'] / MiB:.1f} "
        f"MiB with AdamW and {sharded['allocated_bytes'] / MiB:.1f} MiB sharded; the peak so far "
        f"drops by {dropped / MiB:.1f} MiB, the AdamW state it no longer keeps "
        f"({state / MiB:.1f} MiB). Before the step both hold the same: parameters and gradients "
        f"({rank0.loc[('AdamW', 'before step'), 'allocated_bytes'] / MiB:.1f} MiB); the peaks "
        "during each phase lie above what is held after it, by temporaries this table does not "
        "name."
    )


def handout_points(parameters: int, world_size: int = 2) -> pd.DataFrame:
    """The handout's three points of an fp32 AdamW step, in GB: parameters 4 P after init, + 4 P
    gradients before the step, + AdamW's 8 P after it (8 P / ``world_size`` sharded)."""
    gb = parameters / 1e9
    return pd.DataFrame(
        {
            "point": ["after init", "before step", "after step"],
            "AdamW_GB": [4 * gb, 8 * gb, 16 * gb],
            "sharded_AdamW_GB": [4 * gb, 8 * gb, (8 + 8 / world_size) * gb],
        }
    )


def zero_step_comparison(steps: pd.DataFrame) -> Comparison | None:
    """Sharded AdamW's step against AdamW's, paired by round (``zero_configs``' sweep), or None
    where a timing failed."""
    if not (steps["status"] == "ok").all():
        return None
    rounds = steps.set_index("optimizer")["round_ms"].map(round_seconds)
    return paired_comparison(
        rounds["adamw"], rounds["sharded-adamw"], names=("AdamW", "sharded AdamW")
    )


def zero_step_findings(steps: pd.DataFrame, model: str, world_size: int) -> list[Finding]:
    """The ZeRO step's verdict, and whether its rounds give the level a verdict needs; where a
    timing failed, which."""
    cost = zero_step_comparison(steps)
    key = "sharded vs unsharded AdamW step"
    if cost is None:
        failed = ", ".join(steps.loc[steps["status"] != "ok", "status"])
        return [Finding(key, f"no comparison: the ZeRO step timing failed ({failed})", None)]
    outcome = {
        "faster": "sharding makes the step faster",
        "slower": "sharding makes the step slower",
        "same": f"the two steps take the same time within ±{cost.noise_band:.0%}",
        "inconclusive": "a difference in step time is not established",
    }[cost.verdict]
    enough = cost.confidence >= cost.required - 1e-12
    level = "enough" if enough else f"below the {level_text(cost.required)} needed"
    return [
        Finding(key, f"{cost.sentence()} ({model}, {world_size} ranks)", cost),
        Finding(
            "ZeRO step rounds",
            f"{cost.rounds} paired rounds give a {level_text(cost.confidence)} interval of the "
            f"time ratio ({outward(*cost.ci, 3, band_edges(cost.noise_band))}), {level} for a "
            f"verdict: {outcome}.",
            cost,
        ),
    ]


def _ahead(depth: int) -> str:
    return "no prefetch" if depth == 0 else f"{depth} module{'s' if depth > 1 else ''} ahead"


def prefetch_findings(steps: pd.DataFrame, model: str, world_size: int) -> list[Finding]:
    """FSDP's step with each prefetch depth (``prefetch_configs``' sweep), paired by round:
    each depth against the one before, and how many prefetched gathers had finished when
    their weights were needed, in forward and in backward (rank 0, the timed steps)."""
    if not (steps["status"] == "ok").all():
        failed = ", ".join(steps.loc[steps["status"] != "ok", "status"])
        return [Finding("FSDP prefetch", f"no comparison: a timing failed ({failed})", None)]
    rows = steps.sort_values("prefetch").set_index("prefetch")
    rounds = rows["round_ms"].map(round_seconds)
    depths = [int(d) for d in rows.index]
    findings = []
    for shallow, deep in zip(depths, depths[1:], strict=False):
        result = paired_comparison(
            rounds[shallow], rounds[deep], names=(_ahead(shallow), _ahead(deep))
        )
        text = f"FSDP step, {_ahead(deep)} against {_ahead(shallow)}: {result.sentence()}"
        findings.append(Finding(f"FSDP prefetch {deep} vs {shallow}", text, result))
    arrivals = [
        f"{_ahead(d)}: forward {r.forward_in_time:.0f} of {r.forward_prefetched:.0f}, backward "
        f"{r.backward_in_time:.0f} of {r.backward_prefetched:.0f}"
        for d, r in rows.iterrows()
        if d > 0
    ]
    findings.append(
        Finding(
            "FSDP gathers in time",
            f"{model} on {world_size} ranks, prefetched gathers finished before their weights "
            "were needed (rank 0, the timed steps): " + "; ".join(arrivals),
            None,
        )
    )
    return findings


def volume_sentence(volume: pd.DataFrame, world_size: int) -> str:
    """Bytes each rank sends per step (``zero_communication``): this wrapper and ZeRO-1 against
    plain data parallelism."""
    sent = volume.set_index("scheme")["bytes_sent"]
    return (
        f"per step this wrapper sends {sent.iloc[1] / sent.iloc[0]:.2f}x the bytes of plain data "
        f"parallelism, ZeRO-1 {sent.iloc[2] / sent.iloc[0]:.2f}x, for the same optimizer-state "
        f"saving ({world_size} ranks)"
    )


#: FSDP against one process: float32 to 1e-6, float16 compute (fp32 master weights) to 1e-4.
FSDP_TOLERANCE = {"float32": 1e-6, "float16": 1e-4}


def fsdp_parity_checks(fsdp: pd.DataFrame) -> pd.DataFrame:
    """Per compute dtype and rank of ``fsdp_parity``: within ``FSDP_TOLERANCE`` of one
    process, fp32 shard-shaped gradients, identical replicated gradients, weights gathered again
    for backward and none kept for it, every name present."""
    tolerance = fsdp["compute_dtype"].map(FSDP_TOLERANCE)
    return fsdp.assign(
        within_tolerance=fsdp["max_param_diff"] < tolerance,
        tolerance=tolerance,
        replicated_grads_identical=fsdp["replicated_grad_spread"] == 0,
        regathered_for_backward=fsdp["backward_gathers"] > 0,
        none_kept_for_backward=fsdp["full_weights_kept_for_backward"] == 0,
    )[
        [
            "compute_dtype",
            "rank",
            "tolerance",
            "within_tolerance",
            "grads_fp32_shard_shaped",
            "replicated_grads_identical",
            "regathered_for_backward",
            "none_kept_for_backward",
            "names_complete",
        ]
    ]


def fsdp_memory_lines(memory: pd.DataFrame, world_size: int) -> list[str]:
    """``fsdp_memory``'s measured bytes against the formula, and a rank's parameters against
    full replication."""
    ratio = memory["param_bytes_measured"] / memory["param_bytes_replicated"]
    return [
        "parameters measured == computed: "
        f"{bool((memory['param_bytes_measured'] == memory['param_bytes_computed']).all())}",
        "optimizer state measured == computed: "
        f"{bool((memory['state_bytes_measured'] == memory['state_bytes_computed']).all())}",
        f"parameter bytes per rank / full replication: {ratio.max():.3f} on {world_size} ranks "
        f"({memory['param_bytes_measured'].max() / MiB:.2f} MiB vs "
        f"{memory['param_bytes_replicated'].iloc[0] / MiB:.2f} MiB)",
    ]


def gather_sentence(stats: dict, model: str, world_size: int, device: str) -> str:
    """Whether FSDP's prefetched gathers finished before their modules needed them
    (``gather_summary``): counts and waits of one profiled forward; which gathers came late,
    and why, is not named (the medians of gathers and forwards are given beside it)."""
    late = stats["late_wait_ms"] / stats["forward_wall_ms"]
    if stats["ready_in_time"] == stats["prefetched"]:
        why = "every prefetched gather was in time."
    else:
        why = (
            "prefetching one module ahead does not hide every gather here; which modules "
            "waited, and why, this summary does not say (the timeline above shows each)."
        )
    return (
        f"{model} on {world_size} ranks ({device}): the median module's all-gathers took "
        f"{stats['median_gather_ms']:.2f} ms, its forward {stats['median_forward_ms']:.2f} ms. "
        f"{stats['ready_in_time']} of the {stats['prefetched']} prefetched modules had their "
        f"weights before they needed them; the others waited {stats['late_wait_ms']:.1f} ms in "
        f"all ({late:.0%} of the {stats['forward_wall_ms']:.1f} ms forward), besides the first "
        f"module's unprefetched {stats['first_wait_ms']:.1f} ms: {why}"
    )


def example_estimates(work: Workload, hardware: Hardware) -> pd.DataFrame:
    """One estimate per strategy at a typical device count: DP and FSDP on 64, TP on 8, FSDP x
    TP on 32 x 8."""
    return pd.DataFrame(
        [
            estimate("dp", work, hardware, 64).as_dict(),
            estimate("fsdp", work, hardware, 64).as_dict(),
            estimate("tp", work, hardware, 8).as_dict(),
            estimate("fsdp+tp", work, hardware, 32, tp_degree=8).as_dict(),
        ]
    )


def compute_bound_line(name: str, work: Workload, hardware: Hardware, seq_len: int) -> str:
    """The largest compute-bound device count of each strategy."""
    counts = ", ".join(f"{s} {max_compute_bound_devices(s, work, hardware)}" for s in STRATEGIES)
    return (
        f"{name}, batch {work.tokens // seq_len} x {seq_len} tokens: largest compute-bound "
        f"device count: {counts}"
    )


def ffn_lines(ffn: pd.DataFrame) -> list[str]:
    """Each of the FFN problems' quantities: its expression and the reason."""
    return [
        f"{row.problem}, {row.quantity}:\n    {row.expression}\n    ({row.reason})"
        for row in ffn.itertuples()
    ]


def tp_backward_matches_autograd(n_tp: int = 3, seed: int = 0) -> bool:
    """``tp_backward`` on ``n_tp`` shards of random float64 tensors against autograd's
    gradients of the whole FFN, to 1e-12."""
    generator = torch.Generator().manual_seed(seed)

    def leaf(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=generator).requires_grad_()

    x, w1, w2, w3 = leaf(5, 8), leaf(8, 12), leaf(8, 12), leaf(12, 8)
    dy = torch.randn(5, 8, dtype=torch.float64, generator=generator)
    ((torch.nn.functional.silu(x @ w1) * (x @ w2)) @ w3).backward(dy)
    sharded = tp_backward(x.detach(), w1.detach(), w2.detach(), w3.detach(), dy, n_tp=n_tp)
    return all(
        torch.allclose(a, b, rtol=1e-12, atol=1e-12)
        for a, b in zip(sharded, (w1.grad, w2.grad, w3.grad, x.grad), strict=True)
    )


def largest_counts(ffn: pd.DataFrame) -> pd.DataFrame:
    """The FFN answers' rows that are a largest device count."""
    return ffn[ffn["quantity"].str.startswith("largest")]


def ffn_bound_lines(
    ffn: pd.DataFrame,
    hardware: Hardware,
    tokens: int = 2**20,
    d_model: int = 2560,
    d_ff: int = 10240,
) -> list[str]:
    """Each largest device count of the FFN problems in numbers on ``hardware`` (C its peak; W
    its fast link within a tensor-parallel group, its slower link otherwise)."""
    values = {
        ffn_symbols.B: tokens,
        ffn_symbols.D: d_model,
        ffn_symbols.F: d_ff,
        ffn_symbols.C: hardware.flops_per_s,
    }
    lines = []
    for row in largest_counts(ffn).itertuples():
        tp_only = "N_TP" in row.quantity and "N_FSDP" not in row.quantity
        link = hardware.tp_bandwidth if tp_only else hardware.bandwidth
        value = float(row.sympy.subs(values | {ffn_symbols.W: link}))
        lines.append(f"{row.problem}, {row.quantity}: {value:.1f} (W = {link / 1e9:.0f} GB/s)")
    return lines


def dp_bound_sentence(ffn: pd.DataFrame, name: str, work: Workload, hardware: Hardware) -> str:
    """Data parallelism's largest count in the calculator and in the FFN derivation (both
    against the backward), and against the whole step."""
    bounds = largest_counts(ffn)
    formula = bounds.loc[bounds["problem"] == "data_parallel_calcs", "sympy"].iloc[0]
    derived = float(
        formula.subs(
            {
                ffn_symbols.B: work.tokens,
                ffn_symbols.W: hardware.bandwidth,
                ffn_symbols.C: hardware.flops_per_s,
            }
        )
    )
    by_pass = max_compute_bound_devices("dp", work, hardware)
    by_step = max_compute_bound_devices("dp", work, hardware, overlap="step")
    return (
        f"{name}, {work.tokens:,} tokens per step, {hardware.name}: data parallelism stays "
        f"compute-bound up to {by_pass} devices in the calculator (all-reduce against the "
        f"backward's 4 N B S FLOPs) and {derived:.1f} -> {int(derived)} in the FFN derivation "
        f"(1 + B W / C, also the backward). Against the whole step's 6 N B S it would be "
        f"{by_step}: 1.5x the compute to hide behind, but the all-reduce cannot start before "
        "backward has produced the gradients, and the optimizer step waits for it."
    )


def xxl_state_lines(gpu: Accelerator = H100_80GB) -> list[str]:
    """The 2025 handout's XXL on one device: its training state by part, and its saved
    activations per token."""
    state = training_state_bytes(XXL)
    total, per_token = int(state["bytes"].iloc[-1]), XXL.saved_bytes_per_token()
    return [
        state.assign(GB=state["bytes"] / 1e9).round(1).to_string(index=False),
        f"{XXL.parameters / 1e9:.1f} B parameters; the FP32 state is {total / 1e12:.2f} TB, the "
        f"memory of {devices_needed(total, gpu)} {gpu.name} GPUs. Saved for backward (BF16, "
        "each linear's input: x and h): 2 (d_model + d_ff) x 126 = "
        f"{per_token / 1e6:.1f} MB per token, so one H100's worth every "
        f"{gpu.memory_bytes / per_token:,.0f} tokens.",
    ]


def xxl_fsdp_fits(tokens_per_device: list[int], chip: Accelerator = TPU_V5P) -> pd.DataFrame:
    """The smallest FSDP degree that holds XXL on ``chip`` at each token count per device."""
    per_token = XXL.saved_bytes_per_token()
    return pd.DataFrame(
        {
            "tokens_per_device": tokens_per_device,
            "activations_GB": [per_token * t / 1e9 for t in tokens_per_device],
            "min_N_FSDP": [min_fsdp_devices(XXL, chip, t) for t in tokens_per_device],
        }
    )


def xxl_fits_sentence(fits: pd.DataFrame, chip: Accelerator = TPU_V5P) -> str:
    """What the state alone needs, and the token count past which no FSDP degree fits."""
    total = int(training_state_bytes(XXL)["bytes"].iloc[-1])
    return (
        f"Without activations {fits['min_N_FSDP'].iloc[0]} v5p chips hold the state "
        f"({total / chip.memory_bytes:.2f} rounded up); the unsharded half of the activations "
        "eats into every chip, so the count grows quickly with the tokens and no count fits "
        f"beyond {2 * chip.memory_bytes / XXL.saved_bytes_per_token():,.0f} tokens per device."
    )


def mesh_table() -> pd.DataFrame:
    """``mesh_batch`` of XXL on the handout's v5p mesh, large-mesh and ring conventions."""
    columns = [
        "ring_factors",
        "min_tokens_per_fsdp_shard",
        "min_tokens_per_device",
        "min_total_batch",
        "max_Y_tp_hidden",
        "tp_hidden",
    ]
    rows = [mesh_batch(XXL, TPU_V5P, HANDOUT_MESH, ring=ring) for ring in (False, True)]
    return pd.DataFrame(rows)[columns]


def mesh_sentence(mesh: pd.DataFrame, chips: int = 64) -> str:
    """The least tokens per FSDP shard, per chip and in all for the forward to stay
    compute-bound, and how far Y = 4 is from where tensor parallelism stops hiding."""
    first = mesh.iloc[0]
    return (
        f"Each device must compute on at least {first['min_tokens_per_fsdp_shard']:,.0f} tokens "
        "(C / (W_ici M_X); the 4 chips of a tensor-parallel group share them, "
        f"{first['min_tokens_per_device']:,.0f} per chip), a total batch of "
        f"{first['min_total_batch']:,.0f} tokens over the {chips} chips; Y = 4 is well under the "
        f"{first['max_Y_tp_hidden']:.1f} at which the tensor-parallel collectives stop hiding."
    )


def options_sentence(options: pd.DataFrame) -> str:
    """What each option of ``smaller_batch_options`` does to the least total batch."""
    batch = options.set_index("option")["min_total_batch"]
    return (
        "Moving devices from FSDP to tensor parallelism (X 4, Y 16: still under the "
        f"{options['max_Y_tp_hidden'].iloc[0]:.1f} where TP's own collectives surface) cuts the "
        f"total batch {batch.iloc[0] / batch.iloc[1]:.0f}x to {batch.iloc[1]:,.0f} tokens; "
        "gathering the weights as an 8-bit copy halves the gather and the batch "
        f"({batch.iloc[2]:,.0f}); both together give {batch.iloc[3]:,.0f} tokens."
    )


# Notebook 07


def ddp_placement_line(sizes_mb, world_sizes, ddp_world_size: int) -> str:
    """How many ranks this machine holds, and where the all-reduce and data-parallel ranks
    run."""
    return (
        f"this machine holds up to {max_world_size()} ranks; all-reduce {list(sizes_mb)} MB on "
        f"{list(world_sizes)} ranks: {place_ranks(max(world_sizes), ('all_reduce',)).describe()};"
        f" data parallelism: {place_ranks(ddp_world_size, DDP_COLLECTIVES).describe()}"
    )


def busbw_line(allreduce: pd.DataFrame, size_mb: float = 100) -> str:
    """The bus bandwidth of each world size at ``size_mb`` (``allreduce_sweep``)."""
    rows = allreduce[(allreduce["size_mb"] == size_mb) & (allreduce["status"] == "ok")]
    return f"bus bandwidth at {size_mb:g} MB: " + ", ".join(
        f"{r.world_size} ranks {r.busbw_gbps:.2f} GB/s" for r in rows.itertuples()
    )


def ring_error_lines(errors: dict[int, float]) -> tuple[str, list[str]]:
    """The alternate ring's largest difference from ``all_reduce`` per world size, and whether
    each is within 1e-12."""
    largest = "largest difference from all_reduce: " + ", ".join(
        f"{n} ranks {error:.1e}" for n, error in errors.items()
    )
    return largest, [
        f"{n} ranks: the ring equals all_reduce within 1e-12: {error < 1e-12}"
        for n, error in errors.items()
    ]


#: Within this factor: one egress W describes the alternate ring when the world sizes' fitted
#: egress agree; all_reduce takes the textbook ring's time when the measured ratio is N/2.
RING_MODEL_SPREAD = 1.25


def ring_lines(ring: pd.DataFrame, fit: pd.DataFrame) -> list[str]:
    """The alternate ring against ``all_reduce`` at the largest size (model: N/2); whether one
    egress W describes the ring's own times at every world size (``fit_ring_model``); apart
    from it, ``all_reduce``'s time against the textbook ring's model at the ring's egress (a
    miss there is Gloo's all_reduce, not the ring's model); and the fits that had to pass
    through the origin."""
    ok = ring[ring["status"] == "ok"]
    if ok.empty:
        return ["the alternate ring's timing failed at every size: nothing to compare"]
    size = ok["size_mb"].max()
    largest = ok[ok["size_mb"] == size]
    lines = [
        f"at {size:g} MB the alternate ring takes "
        + ", ".join(
            f"{r.ring_over_all_reduce:.2f}x all_reduce's time on {r.world_size} ranks "
            f"(model: {r.world_size / 2:.1f}x)"
            for r in largest.itertuples()
        )
    ]
    if len(fit) >= 2:
        spread = fit["egress_gbps"].max() / fit["egress_gbps"].min()
        lines.append(
            "the ring's own model, time = (N-1) S / W: the egress implied by each world size's "
            "fit, "
            + ", ".join(
                f"N={r.world_size}: {r.egress_gbps:.2f} GB/s (R^2 {r.r2:.3f})"
                for r in fit.itertuples()
            )
            + f", differ {spread:.2f}x: "
            + (
                "consistent with one W for"
                if spread <= RING_MODEL_SPREAD
                else "one W does not describe"
            )
            + " the ring's times (the rule: within 25%; medians, no interval)"
        )
    if len(largest):
        # With the ring's W, the textbook reduce-scatter + all-gather ring would take
        # 2 (N-1)/N S / W: N/2 times less than the alternate ring. all_reduce's time over that.
        over_model = (largest["world_size"] / 2 / largest["ring_over_all_reduce"]).tolist()
        outside = [
            int(n)
            for n, x in zip(largest["world_size"], over_model, strict=True)
            if not 1 / RING_MODEL_SPREAD <= x <= RING_MODEL_SPREAD
        ]
        textbook = not outside
        lines.append(
            "Gloo's all_reduce against the textbook ring's model with the alternate ring's "
            f"egress (2 (N-1)/N S / W, N/2 times less than the alternate ring) at {size:g} MB: "
            + ", ".join(
                f"{x:.2f}x the model's time on {n} ranks"
                for n, x in zip(largest["world_size"], over_model, strict=True)
            )
            + (
                ": consistent with that ring (within 25%)"
                if textbook
                else f": not that ring's time on {', '.join(map(str, outside))} ranks (outside "
                "25%), so this all_reduce is not (only) the textbook ring at this egress; what it "
                "does instead is not measured here"
            )
        )
    lines += [
        f"N={r.world_size}: the free line crossed below zero (a negative latency, noise at "
        f"{r.points} sizes); fitted through the origin instead, latency taken as 0"
        for r in fit[fit["latency_at_bound"]].itertuples()
    ]
    return lines


def ddp_parity_checks(parity: pd.DataFrame) -> pd.DataFrame:
    """Per model and variant of ``ddp_parity_all``: matches one process (to 1e-10 in float64),
    the same gradients on every rank, gradients that match the parameters, frozen parameters
    untouched."""
    return parity.assign(
        matches_one_process=parity["max_param_diff"] < 1e-10,
        same_grads_on_all_ranks=parity["grad_spread_across_ranks"] == 0,
    )[
        [
            "model",
            "variant",
            "matches_one_process",
            "same_grads_on_all_ranks",
            "grads_match_params",
            "frozen_untouched",
        ]
    ]


def gradients_line(steps: pd.DataFrame) -> str:
    """The benchmarked model's parameter tensors and gradient megabytes."""
    row = steps[steps["variant"] == "bucketed"].iloc[0]
    return f"{int(row.parameter_tensors)} parameter tensors, {row.gradient_mb:.1f} MB of gradients"


def overlap_line(overlap: pd.DataFrame) -> str:
    """Each variant's share of all-reduce time that overlaps backward (``overlap_table``)."""
    shares = overlap.set_index("variant")["share_during_backward"]
    return ", ".join(
        f"{variant}: {share:.0%} of its all-reduce time overlaps backward"
        for variant, share in shares.items()
    )


def bucket_table(steps: pd.DataFrame, against_flat: pd.DataFrame) -> pd.DataFrame:
    """The bucketed rows by size, each with its ratio to flat and verdict (``ddp_comparisons``
    against "flat")."""
    versus = against_flat.set_index("b")
    rows = steps[steps["variant"] == "bucketed"].sort_values("bucket_size_mb")
    names = [f"bucketed {s:g} MB" for s in rows["bucket_size_mb"]]
    return rows.assign(
        vs_flat=[versus.loc[n, "ratio_b_over_a"] for n in names],
        verdict=[versus.loc[n, "verdict"] for n in names],
    )


def bucket_sentence(steps: pd.DataFrame, by_size: pd.DataFrame, overlap: pd.DataFrame) -> str:
    """The bucket sizes' verdicts against flat, about what a bucketed step could save (flat's
    median wait after backward less the least a bucketed size waits: medians, no interval),
    and backward's time in the profiled
    steps with and without all-reduces beside it."""
    flat = steps[steps["variant"] == "flat"].iloc[0]
    counts = by_size["verdict"].value_counts()
    least = by_size["sync_ms"].min()
    bound = flat["sync_ms"] - least
    backward = overlap.set_index("variant")["backward_ms"]
    return (
        f"against flat: {counts.get('faster', 0)} of {len(by_size)} bucket sizes faster, "
        f"{counts.get('slower', 0)} slower, {counts.get('same', 0)} the same, "
        f"{counts.get('inconclusive', 0)} not established. Flat waits {flat['sync_ms']:.0f} ms "
        f"after backward in a {flat['step_ms']:.0f} ms step; the bucketed size that waits least, "
        f"{least:.0f} ms: the two medians differ by {bound:.0f} ms "
        f"({bound / flat['step_ms']:.0%} of the step; medians, no interval). In the profiled "
        "steps, backward took "
        f"{backward['naive']:.0f} ms with nothing sent during it (naive), "
        f"{backward['bucketed']:.0f} ms bucketed and "
        f"{backward['individual']:.0f} ms with an all-reduce per parameter beside it (one step "
        "each: a mechanism, not a measurement)."
    )


def overhead_lines(overhead: dict, allreduce: pd.DataFrame, world_size: int) -> list[str]:
    """The bucket-overhead model's fit (``fit_bucket_overhead``): o, w and the optimum, w
    against the all-reduce bandwidth measured at the nearest size, and whether to trust it."""
    shown = {
        (
            "computable fit (o > 0, s/w > 0, 3+ bucket counts; trusted needs more)"
            if k == "valid"
            else k
        ): (round(v, 4) if isinstance(v, float) else v)
        for k, v in overhead.items()
    }
    lines = [str(shown)]
    if not overhead["valid"]:
        return [
            *lines,
            "no usable fit (a non-positive o or s/w, or fewer than 3 bucket counts): the model "
            "does not describe these times",
        ]
    lines.append(
        f"o = {overhead['per_call_ms']:.2f} ms per call, w = {overhead['w_gbps']:.2f} GB/s "
        f"(R^2 {overhead['r2']:.2f} over {overhead['distinct_bucket_counts']} bucket counts); "
        f"the model's optimum (not a measured one): {overhead['best_buckets']:.1f} buckets of "
        f"{overhead['best_bucket_mb']:.1f} MB"
    )
    measured = allreduce[(allreduce["status"] == "ok") & (allreduce["world_size"] == world_size)]
    if len(measured):
        nearest = measured.iloc[
            (measured["size_mb"] - overhead["gradient_bytes"] / 1e6).abs().argmin()
        ]
        lines.append(
            f"the fitted w is {overhead['w_gbps'] / nearest.algbw_gbps:.2f}x the all-reduce "
            f"bandwidth measured in section 2 at {nearest.size_mb:g} MB on {world_size} ranks "
            f"({nearest.algbw_gbps:.2f} GB/s)"
        )
    trusted = overhead["r2"] >= 0.9 and overhead["distinct_bucket_counts"] >= 4
    lines.append(
        "a fit to trust"
        if trusted
        else "too few bucket counts or too loose a fit to trust the optimum (R^2 below 0.9 or "
        "fewer than 4 bucket counts)"
    )
    return lines
