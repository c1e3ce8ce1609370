"""An ablation's variants (`ablate --variant NAME:SETTING,…`): a variant's text, its spec (what a finished variant
is recognised by on a rerun) and the lab's preset with its settings applied. The settings each field takes are
`ablate`'s (pipeline/ablate.py's docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..config import LabPreset, apply_settings

VARIANT_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
# A setting starts at a comma followed by SECTION.FIELD=, so JSON values may hold commas (lists of categories).
SETTING_SPLIT = re.compile(r",(?=\s*[A-Za-z_]+\.[A-Za-z_]+\s*=)")
# variant.FIELD=VALUE: what each field accepts
VARIANT_FIELDS = {
    "qat": re.compile(r"^(true|false)$", re.IGNORECASE),
    "init": re.compile(r"^(base|distilled|layers:[1-9]\d*)$"),
    "onpolicy": re.compile(r"^(true|false)$", re.IGNORECASE),
    "select_reference": re.compile(r"^(distilled)$"),
}
VARIANT_DEFAULTS = {"qat": "true", "init": "base", "onpolicy": "false", "select_reference": ""}


@dataclass(frozen=True)
class Variant:
    name: str
    distill_settings: tuple[str, ...]  # "distill.FIELD=VALUE" and "onpolicy.FIELD=VALUE", as given
    qat: bool = True  # QAT after distillation, like the lab; False scores the distilled drafter at Q4_0 PTQ
    export_settings: tuple[str, ...] = ()  # "export.FIELD=VALUE", as given
    # the drafter distilled: the lab's base, its distilled drafter (to go on from), or "layers:N" (N of the target's)
    init: str = "base"
    onpolicy: bool = False  # first the starting drafter writes on-policy data (`onpolicy`), trained on beside the rest
    select_reference: str = ""  # token selection's reference drafter: "distilled" (the lab's), or none

    def text(self) -> str:
        """The ``--variant`` argument that parses back to this variant."""
        settings = [*self.distill_settings, *self.export_settings, *([] if self.qat else ["variant.qat=false"])]
        settings += [] if self.init == "base" else [f"variant.init={self.init}"]
        settings += ["variant.onpolicy=true"] if self.onpolicy else []
        settings += [f"variant.select_reference={self.select_reference}"] if self.select_reference else []
        return f"{self.name}:{','.join(settings)}"

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name, "distill_settings": list(self.distill_settings), "qat": self.qat}
        # absent when unused, so that the specs of variants run before these settings existed still match
        if self.export_settings:
            spec["export_settings"] = list(self.export_settings)
        if self.init != "base":
            spec["init"] = self.init
        if self.onpolicy:
            spec["onpolicy"] = True
        if self.select_reference:
            spec["select_reference"] = self.select_reference
        return spec

    def target_layers(self) -> int | None:
        """N of ``variant.init=layers:N``, else None (the lab's base)."""
        return int(self.init.partition(":")[2]) if self.init.startswith("layers:") else None


def parse_variant(text: str) -> Variant:
    """``NAME:distill.FIELD=VALUE,…,export.FIELD=VALUE,…,variant.qat=false`` → a Variant (settings checked against the
    config later)."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    if not colon or not VARIANT_NAME.match(name):
        raise ValueError(
            f"--variant {text!r}: expected NAME:SECTION.FIELD=VALUE,… with NAME of letters, digits and "
            "._+- (e.g. 'tvd:distill.loss=tvd')"
        )
    settings: dict[str, list[str]] = {"distill": [], "export": []}
    fields = dict(VARIANT_DEFAULTS)
    for setting in (s.strip() for s in SETTING_SPLIT.split(rest) if s.strip()):
        key, eq, value = setting.partition("=")
        section, _, field_name = key.strip().partition(".")
        if section in settings and eq:
            settings[section].append(setting)
        elif section == "onpolicy" and eq:  # trained data's settings, kept with distillation's
            settings["distill"].append(setting)
        elif section == "variant" and field_name in VARIANT_FIELDS and VARIANT_FIELDS[field_name].match(value.strip()):
            fields[field_name] = value.strip().lower()
        else:
            raise ValueError(
                f"--variant {name}: setting {setting!r}: expected distill.FIELD=VALUE, export.FIELD=VALUE, "
                "variant.qat=true|false, variant.init=base|distilled|layers:N, variant.onpolicy=true|false or "
                "variant.select_reference=distilled"
            )
    return Variant(
        name,
        tuple(settings["distill"]),
        fields["qat"] == "true",
        tuple(settings["export"]),
        fields["init"],
        fields["onpolicy"] == "true",
        fields["select_reference"],
    )


def variant_preset(preset: LabPreset, variant: Variant) -> LabPreset:
    """The lab's preset with the variant's distill and export settings applied (unknown fields and wrong types are
    refused, as is an unknown embedding type)."""
    try:
        applied = apply_settings(preset, [*variant.distill_settings, *variant.export_settings])
        applied.export.resolved_embedding_type()
    except ValueError as error:
        raise ValueError(f"--variant {variant.name}: {error}") from None
    return applied
