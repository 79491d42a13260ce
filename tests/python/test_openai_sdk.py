"""OpenAI's Python SDK (`client.decisions.create`) against decide, unchanged but for base_url."""
import math

import openai
import pytest

TICKET = "I was charged twice for my subscription this month. Please refund the extra charge."


def client(server, key="unused"):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=key, max_retries=0)


def test_every_question_type_round_trips(server):
    decision = client(server).decisions.create(
        model="gpt-6-luna",
        input=TICKET,
        questions=[
            {"type": "predicate", "name": "refund", "instructions": "The customer asks for a refund."},
            {"type": "choice", "instructions": "Which team owns this?",
             "choices": [{"value": "billing", "description": "payments"}, {"value": "shipping"}, {"value": True}]},
            {"type": "score", "name": "anger", "instructions": "How angry is the customer?",
             "levels": [{"label": "calm"}, {"label": "annoyed", "description": "mildly upset"}, {"label": "furious"}]},
        ],
    )
    refund, team, anger = decision.answers
    assert refund.type == "predicate" and refund.name == "refund" and 0 <= refund.probability <= 1
    assert team.type == "choice" and team.name is None
    assert [p.value for p in team.probabilities] == ["billing", "shipping", True]
    assert math.isclose(sum(p.probability for p in team.probabilities), 1.0, abs_tol=1e-9)
    assert team.choice in ("billing", "shipping", True)
    assert anger.type == "score" and [p.value for p in anger.probabilities] == [0, 1, 2]
    assert math.isclose(anger.score, sum(p.value * p.probability for p in anger.probabilities), abs_tol=1e-9)
    assert isinstance(decision.usage.input_tokens, int) and decision.usage.input_tokens > 0
    assert decision.usage.output_tokens == 0
    assert decision.usage.input_tokens_details.cached_tokens >= 0
    assert decision.usage.total_tokens == decision.usage.input_tokens


def test_message_input_and_instruction_parts(server):
    decision = client(server).decisions.create(
        model="gpt-6-luna",
        input=[
            {"role": "developer", "content": "Tickets come from the support form."},
            {"role": "user", "content": [{"type": "input_text", "text": TICKET},
                                         {"type": "input_json", "data": {"plan": "pro", "charges": 2}}]},
        ],
        questions=[{"type": "predicate", "instructions": [{"type": "input_text", "text": "The customer was overcharged."}]}],
        prompt_cache_key="tenant-a",
        safety_identifier="user-123",
    )
    assert decision.answers[0].type == "predicate"


def test_a_question_that_cannot_be_read_is_a_refusal(server):
    decision = client(server).decisions.create(
        model="gpt-6-luna",
        input=TICKET,
        questions=[
            {"type": "choice", "name": "wide", "instructions": "Pick one.", "choices": [{"value": f"o{i}"} for i in range(30)]},
            {"type": "predicate", "instructions": "The text is in English."},
        ],
        # 30 options fit `auto` (wide-direct); the single-letter readout cannot hold them.
        extra_body={"extra": {"backend_options": {"readout": "direct"}}},
    )
    assert decision.answers[0].type == "refusal" and decision.answers[0].name == "wide"
    assert "30 options" in decision.answers[0].model_extra["extra"]["error"]["message"]
    assert decision.answers[1].type == "predicate"


def test_invalid_requests_raise_bad_request(server):
    with pytest.raises(openai.BadRequestError) as raised:
        client(server).decisions.create(
            model="gpt-6-luna", input=TICKET,
            questions=[{"type": "choice", "instructions": "?", "choices": [{"value": "a"}]}],
        )
    assert "questions[0].choices" in str(raised.value)
    with pytest.raises(openai.BadRequestError):
        client(server).decisions.create(model="gpt-6-luna", input="", questions=[{"type": "predicate", "instructions": "?"}])
    with pytest.raises(openai.NotFoundError):
        client(server).decisions.create(model="no-such-model", input=TICKET, questions=[{"type": "predicate", "instructions": "?"}])


def test_api_key_is_enforced_when_configured(keyed_server):
    with pytest.raises(openai.AuthenticationError):
        client(keyed_server, key="wrong").decisions.create(
            model="gpt-6-luna", input=TICKET, questions=[{"type": "predicate", "instructions": "?"}])
    ok = client(keyed_server, key="sekret").decisions.create(
        model="gpt-6-luna", input=TICKET, questions=[{"type": "predicate", "instructions": "Refund?"}])
    assert ok.answers[0].type == "predicate"


def test_models_list(server):
    models = client(server).models.list()
    assert len(models.data) == 1 and models.data[0].id
