"""Planning values: SchedulerChoice, Rejection, Adjustment, and the Provenance and KernelSpec."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    from mmaplug.analysis.problem import MatmulProblem
    from mmaplug.planning.device import Device
    from mmaplug.planning.params import MatmulParams


@final
@attrs.frozen
class SchedulerChoice:
    """A scheduler plugin accepts the problem; the highest ``priority`` wins, ties by ``name``."""

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    priority: int = attrs.field(validator=attrs.validators.instance_of(int))


@final
@attrs.frozen
class Rejection:
    """A scheduler plugin cannot take the problem; ``reason`` says why and what would help."""

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    reason: str = attrs.field(validator=attrs.validators.instance_of(str))


@final
@attrs.frozen
class Adjustment:
    """A change the chosen scheduler forces on one field: from ``old`` to ``new``, and why.

    Core applies it after validation and records it in ``KernelSpec.provenance``, so a
    plugin's value is never replaced silently.
    """

    field: str = attrs.field(validator=attrs.validators.instance_of(str))
    old: object
    new: object
    reason: str = attrs.field(validator=attrs.validators.instance_of(str))

    def describe(self) -> str:
        """One line: ``stages: 6 -> 4 (why)``."""
        return f"{self.field}: {self.old!r} -> {self.new!r} ({self.reason})"


@final
@attrs.frozen(kw_only=True)
class Provenance:
    """How a KernelSpec's params were decided: who supplied each field, and what was changed.

    ``scheduler_plugin`` is the plugin that offered the chosen scheduler (it must build it).
    ``shape_class`` names the shape class a fusion with symbolic extents planned this for
    (``MatmulProblem.shape_class``); empty for a fusion of static extents.
    """

    base: str
    sources: tuple[tuple[str, str], ...]
    adjustments: tuple[Adjustment, ...] = ()
    consulted: tuple[str, ...] = ()
    candidates: tuple[SchedulerChoice | Rejection, ...] = ()
    dropped: tuple[str, ...] = ()
    scheduler_plugin: str = ""
    shape_class: str = ""

    def source(self, field: str) -> str:
        """The plugin (or ``"caller"``, ``"override_matmul_params"``) whose value *field*
        holds: after an adjustment, the adjuster's (``adjustments`` says whose value it
        replaced)."""
        return dict(self.sources)[field]


@final
@attrs.frozen(kw_only=True)
class KernelSpec:
    """What to build: scheduler, problem, device and params; its own cache key.

    ``provenance`` does not take part in equality: two plans giving the same kernel are equal.
    """

    scheduler: str
    problem: MatmulProblem
    device: Device
    params: MatmulParams
    provenance: Provenance = attrs.field(eq=False)

    @property
    def name(self) -> str:
        """Stable readable name, e.g. ``mm_sm90a_ampere_f16f16_TN_cta128x128x32_..._s3_k1``."""
        p = self.problem
        dtypes = _short(p.operand_dtype.label) + _short(p.output_dtype.label)
        epilogue = "".join(f"_{op}" for op in p.epilogue_ops)
        target = self.device.target.replace("_", "")
        layout = p.layout.value
        return f"mm_{target}_{self.scheduler}_{dtypes}_{layout}_{self.params.name}{epilogue}"


def _short(label: str) -> str:
    """``f16``, ``bf16``, ``f32``; the FP8 formats as PTX names them (``e4m3``, ``e5m2``)."""
    return {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}.get(label, label.replace("float", "f"))
