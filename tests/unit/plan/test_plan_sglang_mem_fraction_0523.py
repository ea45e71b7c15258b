"""SGLang 0.5.23's default ``mem_fraction_static`` (``arg_groups/memory_hook.py``
``handle_gpu_memory_settings``, lines 47-355; ``reserve_for_graph_mb`` lines 357-399):
``reserved = 512 + max(chunk, 2048) x 1.5 + tp x pp / 8 x 1024 + decode max_bs x 2 + the prefill
graph`` (non-MLA: 8 MiB per captured size, ``cuda_graph_hook.py`` lines 480-497; MLA: 1536 MiB;
off under PP, lines 150-161), floored at 10 GiB above 60 GiB cards, ``round((gpu - reserved) /
gpu, 3)``. Expected values worked by hand below; 81,559 MiB is the H100 figure the other SGLang
tests use."""

from __future__ import annotations

from kvbudget.capacity.sglang_pool import sglang_defaults

H100_MIB = 81559
V0523 = (0, 5, 23)


def test_h100_tp1_reserves_the_prefill_graph() -> None:
    # tier < 90 GiB (lines 132-145): chunk 8192, decode max_bs 256 (tp < 4)
    # prefill sizes <= 8192: 8 (4..32) + 14 (48..256) + 8 (288..512) + 8 (576..1024)
    # + 12 (1280..4096) + 8 (4608..8192) = 58 -> 464 MiB; graph 256 x 2 + 464 = 976
    # reserved 512 + 8192 x 1.5 + 1 x 1 / 8 x 1024 + 976 = 512 + 12288 + 128 + 976 = 13904
    # (> 10240 floor); (81559 - 13904) / 81559 = 67655 / 81559 = 0.82952 -> 0.83
    d = sglang_defaults(V0523, gpu_memory_mib=H100_MIB, tp=1)
    assert d.reserved_mib == 13904
    assert d.mem_fraction_static == 0.83
    assert (d.chunked_prefill_size, d.cuda_graph_max_bs) == (8192, 256)
    # 0.5.4 keeps its rule: 512 + 12288 + 256 x 2 + 128 = 13440 -> 68119 / 81559 = 0.835
    assert sglang_defaults((0, 5, 4), gpu_memory_mib=H100_MIB, tp=1).mem_fraction_static == 0.835


def test_mla_tp8_reserves_1536_mib_for_the_prefill_graph() -> None:
    # max_bs 512 (tp >= 4); graph 512 x 2 + 1536 = 2560 (lines 387-389)
    # reserved 512 + 12288 + 8 / 8 x 1024 + 2560 = 16384; 65175 / 81559 = 0.79912 -> 0.799
    d = sglang_defaults(V0523, gpu_memory_mib=H100_MIB, tp=8, mla=True)
    assert d.reserved_mib == 16384
    assert d.mem_fraction_static == 0.799


def test_given_running_cap_and_chunk_then_the_floor() -> None:
    # max_bs 256 capped at --max-running-requests 64 (lines 182-188); chunk 2048 given:
    # prefill sizes <= 2048: 8 + 14 + 8 + 8 + 4 (1280..2048) = 42 -> 336 MiB
    # reserved 512 + 3072 + 128 + 64 x 2 + 336 = 4176 -> floor 10240 (lines 314-315)
    # (81559 - 10240) / 81559 = 71319 / 81559 = 0.87444 -> 0.874
    d = sglang_defaults(
        V0523,
        gpu_memory_mib=H100_MIB,
        tp=1,
        max_running_requests=64,
        chunked_prefill_size=2048,
    )
    assert d.cuda_graph_max_bs == 64
    assert d.reserved_mib == 10240
    assert d.mem_fraction_static == 0.874


def test_24gib_tier_changed() -> None:
    # 23034 MiB < 35 GiB (lines 101-117): chunk 4096, max_bs 48 (0.5.4: 2048 and 16/24)
    # prefill sizes <= 4096: 8 + 14 + 8 + 8 + 12 = 50 -> 400 MiB; graph 96 + 400 = 496
    # reserved 512 + 4096 x 1.5 + 128 + 496 = 7280 (no floor <= 60 GiB)
    # (23034 - 7280) / 23034 = 15754 / 23034 = 0.68394 -> 0.684
    d = sglang_defaults(V0523, gpu_memory_mib=23034, tp=1)
    assert (d.chunked_prefill_size, d.cuda_graph_max_bs) == (4096, 48)
    assert d.reserved_mib == 7280
    assert d.mem_fraction_static == 0.684


def test_pp_turns_the_prefill_graph_off() -> None:
    # PP 2: breakable prefill graph off by default (cuda_graph_hook.py lines 150-161)
    # reserved 512 + 12288 + 1 x 2 / 8 x 1024 + 256 x 2 = 13568; 67991 / 81559 = 0.83364 -> 0.834
    d = sglang_defaults(V0523, gpu_memory_mib=H100_MIB, tp=1, pp=2)
    assert d.reserved_mib == 13568
    assert d.mem_fraction_static == 0.834
    # the same without a prefill graph (DeepSeek-V4, cuda_graph_hook.py lines 192-201) at PP 1:
    # 512 + 12288 + 128 + 512 = 13440 -> 0.835
    off = sglang_defaults(V0523, gpu_memory_mib=H100_MIB, tp=1, prefill_graph=False)
    assert off.mem_fraction_static == 0.835


def test_unknown_memory_falls_back_to_095() -> None:
    # lines 324-328: 0.95 when the device memory is unknown (0.5.4: 0.88)
    assert sglang_defaults(V0523, gpu_memory_mib=None, tp=1).mem_fraction_static == 0.95
