"""Translation-phase hooks: a plugin teaches mmaplug a matmul-like op and observes translation."""

from __future__ import annotations

import numpy as np
import pytest

import mmaplug as mp
from mmaplug.analysis.patterns import MatmulPattern
from mmaplug.analysis.translate import translate_as
from mmaplug.ir.fusion import Expr, IterDomain, IterType
from mmaplug.ir.ops import LinearOp, MmaOp
from mmaplug.testing import registered


class NTMatmulOp(Expr):
    """A plugin's own op: ``a @ b.T`` for a ``[M, K]`` and b ``[N, K]`` (no bias)."""

    kind = "nt_matmul"
    dim_pairs = LinearOp.dim_pairs

    def evaluate(self, args: list) -> np.ndarray:
        return args[0] @ args[1].T


class Recogniser:
    """Finds *op* nodes (NTMatmulOp) as patterns of *kind* (``nt_matmul``)."""

    def __init__(self, op: type = NTMatmulOp, kind: str = "nt_matmul", name: str = "") -> None:
        self.op, self.kind = op, kind
        if name:
            self.name = name

    @mp.hookimpl
    def mmaplug_matmul_patterns(self, fusion: mp.Fusion) -> list[MatmulPattern]:
        return [
            MatmulPattern(e.inputs[0], e.inputs[1], e.output, self.kind)
            for e in fusion.exprs()
            if isinstance(e, self.op)
        ]


class Translator:
    """Translates them as F.linear, which has the same operand roles."""

    @mp.hookimpl
    def mmaplug_translate_pattern(self, fusion: mp.Fusion, pattern: MatmulPattern) -> bool | None:
        if pattern.kind != "nt_matmul":
            return None
        translate_as(fusion, pattern, "linear")
        return True


class Observer:
    """Records what was translated."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    @mp.hookimpl
    def mmaplug_fusion_translated(self, fusion: mp.Fusion, patterns: list) -> None:
        self.seen.append([p.kind for p in patterns])


def nt_fusion(m: int = 48, n: int = 40, k: int = 32) -> mp.Fusion:
    with mp.FusionDefinition() as fd:
        a = fd.define_tensor([m, k], dtype=mp.float16)
        b = fd.define_tensor([n, k], dtype=mp.float16)
        fusion = fd.fusion
        out = fusion.new_tensor(
            mp.float16, [IterDomain(m), IterDomain(n), IterDomain(k, IterType.REDUCTION)]
        )
        fusion.attach(NTMatmulOp([out], [a, b]))
        fd.add_output(fd.ops.cast(fd.ops.relu(out), mp.float16))
    return fusion


@pytest.fixture
def pm() -> mp.PluginManager:
    return mp.make_plugin_manager(load_entrypoints=False, strict=True)


def test_plugin_recogniser_and_translator_make_a_matmul_problem(pm: mp.PluginManager) -> None:
    """A recognised and translated plugin op yields the same problem as the F.linear it mirrors."""
    fusion = nt_fusion()
    with registered(pm, Recogniser(), Translator()):
        found = mp.find_matmul_patterns(fusion, pm=pm)
        problem = mp.matmul_problem(fusion, pm=pm)
    assert [p.kind for p in found] == ["nt_matmul"]
    assert (problem.m, problem.n, problem.k, problem.layout) == (48, 40, 32, mp.Layout.TN)


def test_translated_plugin_op_computes_the_same_values(pm: mp.PluginManager) -> None:
    """mp.evaluate agrees before and after translation; the plugin op became an MmaOp."""
    fusion = nt_fusion()
    rng = np.random.default_rng(0)
    inputs = [
        rng.standard_normal((48, 32)).astype(np.float16),
        rng.standard_normal((40, 32)).astype(np.float16),
    ]
    before = mp.evaluate(fusion, inputs)[0]
    with registered(pm, Recogniser(), Translator()):
        patterns = mp.translate_matmul_patterns(fusion, pm=pm)
    assert [p.kind for p in patterns] == ["mma"]
    assert any(isinstance(e, MmaOp) for e in fusion.exprs())
    assert not any(isinstance(e, NTMatmulOp) for e in fusion.exprs())
    np.testing.assert_array_equal(mp.evaluate(fusion, inputs)[0], before)


def test_recognised_kind_without_translator_is_the_recognisers_fault(pm: mp.PluginManager) -> None:
    """A pattern kind nobody translates is a fault of the plugin that recognised it, naming
    both (before, it was an UnsupportedFusionError that mp.compile turned into a silent
    framework segment)."""
    with registered(pm, Recogniser()) as (name,), pytest.raises(mp.PluginResultError) as info:
        mp.translate_matmul_patterns(nt_fusion(), pm=pm)
    assert "recognised pattern kind 'nt_matmul' (output T2), which no plugin" in str(info.value)
    assert (info.value.plugin, info.value.hook) == (name, "mmaplug_matmul_patterns")


def test_a_dropped_recogniser_leaves_the_op_to_the_built_in_kinds() -> None:
    """Warning mode: the claimer is named and dropped, and the linear is found and translated
    as the built-in kind, so the fusion still gets its kernel."""
    claimer = Recogniser(LinearOp, "my_linear", name="claimer")  # F.linear, translating nothing
    pm = mp.make_plugin_manager(plugins=[claimer], load_entrypoints=False, strict=False)
    with mp.FusionDefinition() as fd:
        x = fd.define_tensor([256, 256], dtype=mp.float16)
        w = fd.define_tensor([256, 256], dtype=mp.float16)
        fd.add_output(fd.ops.linear(x, w))
    observer = Observer()
    with registered(pm, observer), pytest.warns(mp.PluginWarning, match="plugin 'claimer'"):
        compiled = mp.compile(fd, device="h200", pm=pm)
    assert isinstance(compiled, mp.CompiledFusion) and observer.seen == [["linear"]]


def test_unrecognised_op_is_no_matmul(pm: mp.PluginManager) -> None:
    """Without the recogniser the plugin op is invisible: no matmul pattern is found."""
    with pytest.raises(mp.UnsupportedFusionError, match="no matmul pattern"):
        mp.matmul_problem(nt_fusion(), pm=pm)


def test_translation_observer_sees_every_translation(pm: mp.PluginManager) -> None:
    """mmaplug_fusion_translated is called once per translation with the patterns' kinds."""
    observer = Observer()
    with registered(pm, Recogniser(), Translator(), observer):
        mp.translate_matmul_patterns(nt_fusion(), pm=pm)
    assert observer.seen == [["nt_matmul"]]


def test_translate_as_rejects_unknown_kinds() -> None:
    """translate_as only takes the built-in kinds, and says which they are."""
    fusion = nt_fusion()
    pattern = MatmulPattern(fusion.inputs[0], fusion.inputs[1], fusion.outputs[0], "x")
    with pytest.raises(mp.UnsupportedFusionError, match="linear"):
        translate_as(fusion, pattern, "einsum")
