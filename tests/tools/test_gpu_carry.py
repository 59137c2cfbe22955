"""What the GPU image lacks must travel in .whl/ (bert/tools/gpu/carry.py), checked on the CPU:
the 2026-11-26 window lost a device call to `import annotated_types` (pydantic was neither on
the image nor carried)."""

from __future__ import annotations

from bert.tools.gpu import carry


def test_every_requirement_is_on_the_image_or_carried():
    assert carry.uncovered() == []


def test_the_2026_11_26_carry_would_have_been_caught():
    """Only mlperf-logging carried, as before that window: pydantic is named; carrying pydantic
    alone names what pydantic itself needs and the image lacks."""
    assert carry.uncovered(carried={"mlperf-logging"}) == ["pydantic (needed by the project)"]
    assert carry.uncovered(carried={"mlperf-logging", "pydantic"}) == [
        "annotated-types (needed by pydantic)",
        "pydantic-core (needed by pydantic)",
        "typing-inspection (needed by pydantic)",
    ]


def test_requirement_names_and_extras():
    assert carry.requirement_name("pydantic-core==2.50.5") == "pydantic-core"
    assert carry.requirement_name("Typing_Extensions>=4.16") == "typing-extensions"
    assert carry.requirement_name("email-validator>=2.0.0; extra == 'email'") is None
    assert "pydantic" in carry.carried_wheels() and "mlperf-logging" in carry.carried_wheels()
