"""mmaplug.cuda.grid_constant on IR and PTX shaped as Numba writes them: an array's data
pointer becomes bytes passed by value (64-byte aligned, grid-constant), the body untouched,
and IR or PTX of any other shape is refused by name."""

from __future__ import annotations

import pytest

from mmaplug.cuda import grid_constant
from mmaplug.cuda.grid_constant import DATA_SLOT
from mmaplug.errors import KernelBuildError

ENTRY = "_Z6kernelP5Array"
# a kernel of one uint64 array and one int64, as Numba lowers it (kernel_fixup done)
IR = f"""target triple = "nvptx64-nvidia-cuda"

define void @"{ENTRY}"(i8* %"maps.0", i8* %"maps.1", i64 %"maps.2", i64 %"maps.3", i64* %"maps.4", i64 %"maps.5.0", i64 %"maps.6.0", i64 %"K")
{{
entry:
  %".5" = getelementptr i64, i64* %"maps.4", i64 16
  ret void
}}

!nvvmir.version = !{{ !0 }}
!nvvm.annotations = !{{ !1 }}
!0 = !{{ i32 2, i32 0, i32 3, i32 2 }}
!1 = !{{ void (i8*, i8*, i64, i64, i64*, i64, i64, i64)* @"{ENTRY}", !"kernel", i32 1 }}
"""  # noqa: E501
PTX = f""".visible .entry {ENTRY}(
	.param .u64 {ENTRY}_param_0,
	.param .u64 {ENTRY}_param_4,
	.param .u64 {ENTRY}_param_7
)
{{
	ld.param.u64 	%rd1, [{ENTRY}_param_4];
	ld.param.u64 	%rd2, [{ENTRY}_param_7];
	ld.param.u64 	%rd3, [{ENTRY}_param_4];
}}
"""


def test_the_data_pointer_becomes_aligned_bytes_by_value() -> None:
    out = grid_constant.by_value(IR, ENTRY, DATA_SLOT, 256)
    array = "[32 x i64]"
    assert f'{array}* byval align 64 %"maps.4.value", i64 %"maps.5.0"' in out
    # the body reads the pointer it read before, now the parameter's address
    assert f'  %"maps.4" = bitcast {array}* %"maps.4.value" to i64*\n' in out
    assert out.index("bitcast") < out.index("getelementptr")
    fn = f'void (i8*, i8*, i64, i64, {array}*, i64, i64, i64)* @"{ENTRY}"'
    assert f'!{{ {fn}, !"kernel", i32 1 }}' in out
    assert f'!2 = !{{ {fn}, !"grid_constant", !3 }}' in out and "!3 = !{ i32 5 }" in out
    assert "!nvvm.annotations = !{ !1 , !2 }" in out


def test_numbas_status_returning_function_is_rewritten_alike() -> None:
    """Before ``kernel_fixup`` the function returns Numba's status: the same rewrite."""
    ir = IR.replace(f'define void @"{ENTRY}"', f'define i32 @"{ENTRY}"')
    ir = ir.replace("void (i8*", "i32 (i8*").replace("ret void", "ret i32 0")
    out = grid_constant.by_value(ir, ENTRY, 4, 128)
    assert '[16 x i64]* byval align 64 %"maps.4.value"' in out
    assert f'i32 (i8*, i8*, i64, i64, [16 x i64]*, i64, i64, i64)* @"{ENTRY}", !"grid' in out


@pytest.mark.parametrize(
    ("entry", "param", "nbytes", "why"),
    [
        ("_Z5other", 4, 256, "0 definitions"),
        (ENTRY, 3, 256, r"not an i64\* array pointer"),
        (ENTRY, 9, 256, "missing"),
        (ENTRY, 4, 100, "100 bytes"),
    ],
)
def test_ir_of_another_shape_is_refused(entry: str, param: int, nbytes: int, why: str) -> None:
    with pytest.raises(KernelBuildError, match=why):
        grid_constant.by_value(IR, entry, param, nbytes)


def test_ptx_declares_the_bytes_and_takes_each_loads_address() -> None:
    out = grid_constant.by_value_ptx(PTX, ENTRY, 4, 256)
    assert f"\t.param .align 64 .b8 {ENTRY}_param_4[256],\n" in out
    for reg in ("%rd1", "%rd3"):
        assert f"mov.b64 \t{reg}, {ENTRY}_param_4;\n\tcvta.param.u64 \t{reg}, {reg};" in out
    assert f"ld.param.u64 \t%rd2, [{ENTRY}_param_7];" in out  # the others untouched
    with pytest.raises(KernelBuildError, match="declared 0 times"):
        grid_constant.by_value_ptx(PTX, ENTRY, 5, 256)


def test_the_llvm_index_counts_seven_parameters_an_array() -> None:
    assert grid_constant.llvm_param([True, False, True], 0) == 4
    assert grid_constant.llvm_param([True, False, True], 2) == 7 + 1 + 4
    with pytest.raises(KernelBuildError, match="scalar"):
        grid_constant.llvm_param([True, False], 1)
