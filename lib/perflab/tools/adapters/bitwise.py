"""Can data parallelism be bit-for-bit equal to one process? The course's 2026 FSDP test asks
for it (``torch.equal`` after each SGD step, batch 20 split 10 + 10 over 2 ranks).

In one process, on the FSDP test's model and data shapes (``SmallLM``, 20 sequences of 8
tokens, cross-entropy of the last token), this compares the whole batch's gradient with every
way of combining the two halves' gradients: averaging means, halving each, summing sums and
dividing, summing losses pre-scaled by 1/20, and averaging in float64 then rounding once.
Each order is exact in its scaling (halving is exact in binary), so whatever differs comes from
the matrix products summing 20 rows at once against 10 and 10: the BLAS's own order.

``python -m perflab.tools.adapters.bitwise`` prints the table.
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from perflab.tools.adapters.distributed_checks import SmallLM


def _grads(model, inputs, targets, reduction="mean", scale=1.0) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logits = model(inputs)[:, -1, :].float()
    (F.cross_entropy(logits, targets, reduction=reduction) * scale).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def half_batch_orders(batch: int = 20, seq_len: int = 8, seed: int = 42) -> pd.DataFrame:
    """One row per way of combining two half-batch gradients: how many parameters' gradients
    are bitwise equal to the whole batch's, and the largest difference."""
    torch.manual_seed(seed)
    model = SmallLM()
    torch.manual_seed(seed + 81)
    inputs = torch.randint(0, 100, (batch, seq_len))
    targets = torch.randint(0, 100, (batch,))
    half = batch // 2
    first, second = (inputs[:half], targets[:half]), (inputs[half:], targets[half:])
    whole = _grads(model, inputs, targets)
    m0, m1 = _grads(model, *first), _grads(model, *second)
    s0, s1 = _grads(model, *first, "sum"), _grads(model, *second, "sum")
    p0, p1 = (_grads(model, *part, "sum", 1 / batch) for part in (first, second))
    orders = {
        "(g0 + g1) / 2, each the mean of its half": {n: (m0[n] + m1[n]) / 2 for n in whole},
        "g0 / 2 + g1 / 2": {n: m0[n] / 2 + m1[n] / 2 for n in whole},
        "(sum0 + sum1) / 20, each loss a sum": {n: (s0[n] + s1[n]) / batch for n in whole},
        "g0 + g1, each loss scaled by 1/20": {n: p0[n] + p1[n] for n in whole},
        "(g0 + g1) / 2 in float64, rounded once": {
            n: ((m0[n].double() + m1[n].double()) / 2).float() for n in whole
        },
    }
    rows = []
    for order, grads in orders.items():
        diffs = {n: float((grads[n] - whole[n]).abs().max()) for n in whole}
        rows.append(
            {
                "order": order,
                "bitwise_equal": sum(torch.equal(grads[n], whole[n]) for n in whole),
                "parameters": len(whole),
                "max_difference": max(diffs.values()),
                "differs_in": ", ".join(n for n, d in diffs.items() if d) or "-",
            }
        )
    return pd.DataFrame(rows)


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(half_batch_orders().to_string(index=False))
