//! Bad input gets a clear 4xx naming the field; never a 500, never a crash.

use serde_json::json;

use crate::server::Server;

#[test]
fn openai_validation_errors_are_400_and_name_the_field() {
    let server = Server::ready(&["--max-questions", "3"]);
    let cases = [
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "choice", "instructions": "?", "choices": [{"value": "a"}]}]}),
            "questions[0].choices",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "choice", "instructions": "?", "choices": [{"value": "a"}, {"value": "a"}]}]}),
            "questions[0].choices",
        ),
        (
            json!({"model": "smol", "input": "", "questions": [{"type": "predicate", "instructions": "?"}]}),
            "input",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "predicate", "instructions": "?", "bogus": 1}]}),
            "questions[0].bogus",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "predicate", "instructions": 7}]}),
            "questions[0].instructions",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "telepathy", "instructions": "?"}]}),
            "questions[0].type",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": []}),
            "questions",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}], "temperature": 2}),
            "temperature",
        ),
        (
            json!({"model": "smol", "input": "x", "questions": [
            {"type": "predicate", "instructions": "a"}, {"type": "predicate", "instructions": "b"},
            {"type": "predicate", "instructions": "c"}, {"type": "predicate", "instructions": "d"}]}),
            "questions",
        ),
    ];
    for (body, param) in cases {
        let reply = server.post("/v1/decisions", &body);
        assert_eq!(reply.status, 400, "{body} -> {}", reply.body);
        // The reported field is the one named or a field inside it (e.g. `choices[1].value`).
        let reported = reply.body["error"]["param"].as_str().unwrap_or_default();
        assert!(reported.starts_with(param), "{body} -> {}", reply.body);
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(reported),
            "{}",
            reply.body
        );
    }
    let too_many = server.post("/v1/decisions", &json!({"model": "smol", "input": "x", "questions": vec![json!({"type": "predicate", "instructions": "?"}); 4]}));
    assert!(
        too_many.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-questions"),
        "{}",
        too_many.body
    );
}

#[test]
fn systemone_validation_errors_are_422_with_a_detail_list() {
    let server = Server::ready(&[]);
    let reply = server.post(
        "/v1/systemone",
        &json!({"state": "x", "questions": {"q1": {"type": "choice", "criteria": {"only": null}}}}),
    );
    assert_eq!(reply.status, 422, "{}", reply.body);
    let detail = &reply.body["detail"][0];
    assert_eq!(detail["loc"][0], "body");
    assert_eq!(detail["loc"][1], "questions");
    assert_eq!(detail["loc"][2], "q1");
    assert!(
        detail["msg"].as_str().unwrap().starts_with("questions.q1"),
        "{}",
        reply.body
    );

    let missing_state = server.post(
        "/v1/systemone",
        &json!({"questions": {"q": {"type": "noul", "instructions": "?"}}}),
    );
    assert_eq!(missing_state.status, 422);
    assert_eq!(missing_state.body["detail"][0]["type"], "missing");
    assert_eq!(
        missing_state.body["detail"][0]["loc"],
        json!(["body", "state"])
    );

    // Unknown top-level fields are ignored, as TypeSafe's API does; OpenAI's format refuses them.
    let question = json!({"q": {"type": "noul", "instructions": "Is it about money?"}});
    let extra = server.post(
        "/v1/systemone",
        &json!({"state": "I was charged twice.", "questions": question, "metadata": {"team": "a"}, "stream": false}),
    );
    assert_eq!(extra.status, 200, "{}", extra.body);
    assert!(
        extra.body["answers"]["q"]["noul"].is_number(),
        "{}",
        extra.body
    );
    let openai_extra = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "x", "metadata": {}, "questions": [{"type": "predicate", "instructions": "?"}]}),
    );
    assert_eq!(openai_extra.status, 400, "{}", openai_extra.body);

    // Errors that are not about a field carry `detail: {error_type, message}`.
    let unknown_model = server.post(
        "/v1/systemone",
        &json!({"model": "nonesuch", "state": "x", "questions": question}),
    );
    assert_eq!(unknown_model.status, 404, "{}", unknown_model.body);
    assert_eq!(
        unknown_model.body["detail"]["error_type"],
        "not_found_error"
    );
    assert!(
        unknown_model.body["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("nonesuch"),
        "{}",
        unknown_model.body
    );
}

#[test]
fn malformed_bodies_and_limits_never_500() {
    let server = Server::ready(&["--max-body-bytes", "2000", "--max-input-bytes", "500"]);
    let malformed = server.post_raw("/v1/decisions", "{\"input\": ", "application/json");
    assert_eq!(malformed.status, 400, "{}", malformed.body);
    assert!(malformed.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    let not_object = server.post_raw("/v1/systemone", "[1, 2]", "application/json");
    assert_eq!(not_object.status, 422);

    let huge = server.post("/v1/decisions", &json!({"model": "smol", "input": "x".repeat(3000), "questions": [{"type": "predicate", "instructions": "?"}]}));
    assert_eq!(huge.status, 413, "{}", huge.body);
    assert!(huge.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-body-bytes"));
    let long_input = server.post("/v1/decisions", &json!({"model": "smol", "input": "y".repeat(1000), "questions": [{"type": "predicate", "instructions": "?"}]}));
    assert_eq!(long_input.status, 413, "{}", long_input.body);
    assert!(long_input.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-input-bytes"));

    let wrong_model = server.post("/v1/decisions", &json!({"model": "gpt-9", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}]}));
    assert_eq!(wrong_model.status, 404, "{}", wrong_model.body);
    let image = server.post("/v1/decisions", &json!({"model": "smol", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}], "questions": [{"type": "predicate", "instructions": "?"}]}));
    assert_eq!(image.status, 400);
    assert!(image.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("vision"));
    assert_eq!(server.get("/health").status, 200, "the server survived");
}

#[test]
fn a_question_that_cannot_be_read_is_refused_while_others_answer() {
    let server = Server::ready(&[]);
    let many: Vec<_> = (0..27)
        .map(|i| json!({"value": format!("option {i}")}))
        .collect();
    let reply = server.post(
        "/v1/decisions",
        &json!({"model": "smol", "input": "A short note.", "questions": [
            {"type": "choice", "name": "wide", "instructions": "Pick one.", "choices": many},
            {"type": "predicate", "name": "note", "instructions": "This is a note."}
        ], "extra": {"backend_options": {"readout": "direct"}}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["answers"][0]["type"], "refusal");
    assert_eq!(reply.body["answers"][0]["name"], "wide");
    assert!(reply.body["answers"][0]["extra"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("27 options"));
    assert_eq!(reply.body["answers"][1]["type"], "predicate");

    let jev = server.post("/v1/systemone", &json!({"state": "A short note.", "questions": {
        "wide": {"type": "choice", "criteria": (0..27).map(|i| (format!("o{i}"), serde_json::Value::Null)).collect::<serde_json::Map<_, _>>()},
        "note": {"type": "noul", "instructions": "This is a note."}
    }}));
    // The Jev format has no readout option: `auto` reads 27 criteria with wide labels.
    assert_eq!(jev.status, 200, "{}", jev.body);
    assert!(
        jev.body["answers"]["wide"]["choice"].is_string(),
        "{}",
        jev.body
    );
    assert!(jev.body.get("partial_failures").is_none(), "{}", jev.body);

    let all_fail = server.post("/v1/decisions", &json!({"model": "smol", "input": "x", "questions": [
        {"type": "choice", "instructions": "Pick one.", "choices": (0..30).map(|i| json!({"value": format!("v{i}")})).collect::<Vec<_>>()}],
        "extra": {"backend_options": {"readout": "direct"}}}));
    assert_eq!(all_fail.status, 422, "{}", all_fail.body);
}
