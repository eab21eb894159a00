"""scripts/sass_counts.py (the static SASS check of BENCHMARKS.md run 125), here without a
disassembler: its reading of the SASS lines and of the specs it shares with ncu_probe."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

SASS = """
        /*2550*/                   LDG.E R229, desc[UR48][R2.64] ;
        /*25c0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR24], R24 ;
        /*2610*/              @!P0 BRA `(.L_x_7) ;
        /*2680*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR20], RZ, !UPT ;
        /*3080*/              @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR8], RZ ;
        /*3300*/                   R2UR UR4, R133 ;
        /*3310*/             @UP1 UIADD3 UR5, UR4, 0x1, URZ ;
.L_x_54:
"""


@pytest.fixture(scope="module")
def script(load_script: Callable[[str], ModuleType]) -> ModuleType:
    return load_script("sass_counts")


def test_opcodes_are_read_without_predicates_or_modifiers(script: ModuleType) -> None:
    found = script.OPCODE.findall(SASS)
    assert found == ["LDG", "SYNCS", "BRA", "QGMMA", "SYNCS", "R2UR", "UIADD3"]


def test_a_spec_names_the_problem_and_the_overrides_ncu_probe_does(script: ModuleType) -> None:
    problem, overrides = script.problem_and_overrides(
        script.parse_spec("4096x2048x1024/float8_e4m3fn-block@w256")
    )
    assert (problem.m, problem.n, problem.k) == (4096, 2048, 1024)
    assert (problem.dtype, problem.scale) == ("float8_e4m3fn", "block")
    assert overrides["warp_tile"] == (64, 256, 128)
    problem, overrides = script.problem_and_overrides(script.parse_spec("64x64x128"))
    assert problem.dtype == "bfloat16" and overrides == {}


def test_a_spec_may_name_an_epilogue_and_force_tma_stores(script: ModuleType) -> None:
    """``+bias_gelu`` is the corpus epilogue; ``@tma`` builds the default plan with its packed
    chunks stored by TMA, which the build step's rule leaves to the threads for a fused one."""
    pytest.importorskip("numba")
    import mmaplug as mp

    parsed = script.parse_spec("4096x4096x4096/bfloat16+bias_gelu@tma")
    problem, overrides = script.problem_and_overrides(parsed)
    assert (problem.epilogue, overrides) == ("bias_gelu", {})
    pm = mp.make_plugin_manager(block=["decode", "ampere"], load_entrypoints=False)
    forced = script.built(problem, overrides, parsed[-1], pm, "h200")
    plain = script.built(problem, overrides, "", pm, "h200")
    assert forced._artifact.config.tma_stores and not plain._artifact.config.tma_stores


# nvdisasm -hex of the block-scaled FP8 kernel's promotion (sm_90a): the second word of each
# instruction on its own line; 0x...c2... clears bit 45 (the yield hint), 0x08... sets a reuse flag
ENCODED = """
        /*2490*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR20], RZ, !UPT ;   /* 0x00e00000141879f3 */
                                                                                               /* 0x000fe2000c7008ff */
        /*2650*/                   FFMA R209, R24, R2, R209 ;                                  /* 0x0000000218d17223 */
                                                                                               /* 0x000fc200000000d1 */
        /*2660*/                   FFMA R208, R25, R2, R208 ;                                  /* 0x0000000219d07223 */
                                                                                               /* 0x000fe200000000d0 */
        /*2930*/              @P0 FFMA R143, R56, R2.reuse, R143 ;                             /* 0x00000002388f7223 */
                                                                                               /* 0x080fe2000000008f */
"""  # noqa: E501


def test_hints_read_the_yield_and_reuse_bits_of_the_second_word(script: ModuleType) -> None:
    assert script.hints(ENCODED) == {"FFMA": (3, 1, 1), "QGMMA": (1, 0, 0), "HGMMA": (0, 0, 0)}
    assert script.hints(SASS)["QGMMA"] == (0, 0, 0)  # no encodings: nothing to read
