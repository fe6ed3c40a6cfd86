"""docs/configuration.md is generated from the config schema and must match it."""

from common.config import reference
from tests.conftest import REPO_ROOT


def test_committed_reference_is_current():
    committed = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert committed == reference.render(), (
        "docs/configuration.md is stale: the config schema or common/config/reference.py "
        f"changed. Regenerate it from the project root with `{reference.REGENERATE}`"
    )


def test_every_section_link_names_a_table():
    tables = {section for section, _ in reference.sections()}
    assert set(reference.SECTION_LINKS) <= tables


def test_every_field_has_a_meaning():
    blank = [
        f"{section}.{key}"
        for section, model in reference.sections()
        for key, info in reference.leaf_fields(model)
        if not info.description
    ]
    assert not blank, f"fields without a description: {blank}"


def test_nested_and_term_tables_are_documented():
    tables = {section for section, _ in reference.sections()}
    assert {"learner.lora", "algorithm.advantage.kalman", "reward.terms.<name>"} <= tables
    assert "reward.terms.scorer.options" in tables
