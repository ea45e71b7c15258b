"""A preempted request's re-admission is not counted again in the prefix-cache counters.

vLLM 0.32.0 ``vllm/v1/core/kv_cache_manager.py`` ``record_prefix_cache_stats`` passes
``preempted=request.num_preemptions > 0`` and ``vllm/v1/metrics/stats.py``
``PrefixCacheStats.record`` puts such a lookup into ``preempted_queries`` / ``preempted_hits``,
which ``vllm:prefix_cache_queries`` / ``_hits`` do not include. Expected values by hand: each
request is queried once, with its prompt length.
"""

from __future__ import annotations

import numpy as np

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest


def test_preempted_readmission_not_counted_as_a_query() -> None:
    # 9 blocks of 16 (8 usable = 128 tokens); two 40-token prompts that grow by 60 tokens each:
    # 2 x 100 tokens need 14 blocks, so one of them is preempted and admitted again later.
    cfg = ReplicaConfig(num_gpu_blocks=9, block_size=16, max_model_len=128)
    core = EngineCore(cfg, FixedTiming(), np.random.default_rng(0))
    for i in range(2):
        prompt = tuple(range(100 * i + 10, 100 * i + 50))
        core.add_request(PlannedRequest(f"r{i}", 0.0, prompt, output_tokens=60))
    now = 0.0
    while core.has_work():
        now += core.step(now).duration_s or 1e-3
    st = core.stats()
    assert st.num_preemptions >= 1
    assert st.prefix_cache_queries_tokens == 2 * 40
    assert st.prefix_cache_hits_tokens == 0  # distinct prompts; the readmission's hits excluded
