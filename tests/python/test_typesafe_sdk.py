"""TypeSafe's `typesafe-sdk` (`client.system_one`) against decide, unchanged but for base_url."""
import math

import pytest
from typesafe_sdk import Choice, Noul, Score, TypeSafeClient
from typesafe_sdk import TypeSafeAuthenticationError, TypeSafeNotFoundError, TypeSafeUnprocessableEntityError
from typesafe_sdk import RetryPolicy

TICKET = "I was charged twice for my subscription this month. Please refund the extra charge."


def client(server, key="unused", **options):
    return TypeSafeClient(api_key=key, base_url=server.base, retry=RetryPolicy(max_retries=0), timeout=120, **options)


def test_every_question_type_round_trips(server):
    with client(server) as sdk:
        result = sdk.system_one(
            state=TICKET,
            questions={
                "refund": Noul(instructions="The customer asks for a refund."),
                "team": Choice(instructions="Which team owns this?", criteria={"billing": "payments", "shipping": None}),
                "anger": Score(instructions="How angry is the customer?", criteria=["calm", "annoyed", "furious"]),
            },
        )
    assert 0 <= result.nouls["refund"].noul <= 1
    team = result.choices["team"]
    assert set(team.probabilities) == {"billing", "shipping"} and team.choice in team.probabilities
    assert math.isclose(sum(team.probabilities.values()), 1.0, abs_tol=1e-9)
    anger = result.scores["anger"]
    assert anger.legend == {0: "calm", 1: "annoyed", 2: "furious"}
    assert math.isclose(anger.score, sum(k * p for k, p in anger.probabilities.items()), abs_tol=1e-9)
    assert result.usage.input_tokens > 0 and result.usage.output_tokens == 0


def test_json_states_criteria_forms_and_zstd_bodies(server):
    # A state over 1 KiB makes the SDK compress the body with zstd.
    state = {"subject": "Duplicate charge", "body": TICKET * 8, "history": [{"from": "agent", "text": "Looking into it."}]}
    with client(server) as sdk:
        result = sdk.system_one(
            state=state,
            questions={
                "described": Noul(criteria={"true": "The customer was charged more than once", "false": None}),
                "structured": Choice(instructions={"task": "Route the ticket"}, criteria={"billing": {"owns": "charges"}, "tech": None}),
                "list_state": Score(criteria=[{"level": "low"}, {"level": "high"}]),
            },
        )
        assert set(result.answers) == {"described", "structured", "list_state"}
        assert result.scores["list_state"].legend[1] == {"level": "high"}
        listed = sdk.system_one(state=["first message", {"second": True}], questions={"q": Noul(instructions="Two items?")})
        assert "q" in listed.nouls


def test_renaming_a_question_never_changes_its_answer(server):
    with client(server) as sdk:
        a = sdk.system_one(state=TICKET, questions={"a": Noul(instructions="The customer is upset.")})
        b = sdk.system_one(state=TICKET, questions={"totally_different": Noul(instructions="The customer is upset.")})
    assert a.nouls["a"].noul == b.nouls["totally_different"].noul


def test_validation_errors_raise_unprocessable_entity(server):
    with client(server) as sdk, pytest.raises(TypeSafeUnprocessableEntityError) as raised:
        sdk.system_one(state=TICKET, questions={"one": {"type": "choice", "criteria": {"only": None}}})
    assert raised.value.status == 422


def test_an_unknown_model_raises_not_found_with_the_servers_message(server):
    with client(server) as sdk, pytest.raises(TypeSafeNotFoundError) as raised:
        sdk.system_one(state=TICKET, questions={"q": Noul(instructions="Refund?")}, model="nonesuch")
    assert raised.value.status == 404
    # The SDK reads `detail.message` of a non-validation error.
    assert "model `nonesuch` is not served here" in str(raised.value)


def test_api_key_is_enforced_when_configured(keyed_server):
    with client(keyed_server, key="wrong") as sdk, pytest.raises(TypeSafeAuthenticationError):
        sdk.system_one(state=TICKET, questions={"q": Noul(instructions="Refund?")})
    with client(keyed_server, key="sekret") as sdk:
        assert "q" in sdk.system_one(state=TICKET, questions={"q": Noul(instructions="Refund?")}).nouls


def test_models_list(server):
    with client(server) as sdk:
        models = sdk.models.list()
    assert models.models and models.models[0].name
