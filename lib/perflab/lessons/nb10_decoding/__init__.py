"""The front door of notebook 10, "Decoding fast: KV cache, paged KV cache, static shapes, sampling
on the device". The names `notebooks/10_decoding.ipynb` uses from the library, each imported from
where it lives (open that module for its source). This package also holds the experiments that this
notebook alone runs (``costs``, ``inputs``, ``measurements``, ``roofline``, ``tensor_parallel``),
and its own sentences, computed from their numbers (``findings``).
"""

from perflab.distributed.launch import max_world_size
from perflab.implementations.decode import CACHES, generate
from perflab.implementations.model import get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb10_decoding import findings as say
from perflab.lessons.nb10_decoding.inputs import inference_model, random_prompts
from perflab.lessons.nb10_decoding.measurements import (
    compare_caches,
    compare_int8,
    compare_kv_heads,
    compare_rotary_tables,
    compare_sampling_place,
    compile_static_step,
    count_compilations,
    kv_memory,
    prefill_vs_decode,
    profile_steps,
    throughput_by_batch,
)
from perflab.lessons.nb10_decoding.roofline import compiled_graphs, yardstick_columns
from perflab.lessons.nb10_decoding.tensor_parallel import (
    exactness_line,
    tensor_parallel_findings,
    tensor_parallel_study,
)
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import conclude, conclude_all
from perflab.measure.device import parse_dtype
from perflab.measure.paths import listing
from perflab.measure.peak import measure_copy_bandwidth, measure_peak_matmul
from perflab.plots.decode import plot_decode_roofline, plot_kv_memory

__all__ = [
    "exactness_line",
    "CACHES",
    "inference_model",
    "compare_caches",
    "compare_int8",
    "compare_kv_heads",
    "compare_rotary_tables",
    "compare_sampling_place",
    "compile_static_step",
    "comparison_frame",
    "compiled_graphs",
    "conclude",
    "conclude_all",
    "count_compilations",
    "generate",
    "get_preset",
    "kv_memory",
    "listing",
    "max_world_size",
    "measure_copy_bandwidth",
    "measure_peak_matmul",
    "open_notebook",
    "parse_dtype",
    "plot_decode_roofline",
    "plot_kv_memory",
    "prefill_vs_decode",
    "profile_steps",
    "random_prompts",
    "say",
    "tensor_parallel_study",
    "tensor_parallel_findings",
    "throughput_by_batch",
    "yardstick_columns",
]
