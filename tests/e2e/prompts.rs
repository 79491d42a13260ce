//! `return_prompt`: every decision format returns the prompts each question was read with,
//! and they are what the model read: their token ids decode to their text, their label ids
//! are the labels, their shared prefix is the input's part, the same question reads the same
//! tokens on every format, and asking for them changes no answer.

use serde_json::{json, Value};

use decide_models::Prompter;

use crate::server::{model_path, option_mass_range, Server};

const TICKET: &str = "Hi, I was charged twice for my subscription this month and I am really upset. Please refund the extra charge today.";

/// Instructions that differ from their first word on, so that the questions' prompts part
/// right after the renderer's text that follows the input.
const REFUND: &str = "The customer asks for a refund.";
const TEAM: &str = "Which team should handle this ticket?";
const ANGER: &str = "How angry is the customer?";

fn decisions() -> Value {
    json!({
        "model": "smol",
        "input": TICKET,
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": REFUND},
            {"type": "choice", "name": "team", "instructions": TEAM,
             "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "technical"}]},
            {"type": "score", "name": "anger", "instructions": ANGER,
             "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}]}
        ],
        "extra": {"detail": "full", "return_prompt": true}
    })
}

fn systemone() -> Value {
    json!({
        "state": TICKET,
        "questions": {
            "refund": {"type": "noul", "instructions": REFUND},
            "team": {"type": "choice", "instructions": TEAM,
                     "criteria": {"billing": null, "shipping": null, "technical": null}},
            "anger": {"type": "score", "instructions": ANGER, "criteria": ["calm", "annoyed", "furious"]}
        },
        "return_prompt": true
    })
}

fn prompter() -> Prompter {
    Prompter::load(&model_path()).expect("the test model's tokenizer")
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list of ids: {value}"))
        .iter()
        .map(|id| id.as_u64().expect("a token id") as u32)
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// Checks one read against the tokenizer: its ids decode to its text (after the BOS token
/// when the model adds one), its label ids are its labels, its prefix is within it. Returns
/// its token ids and prefix length.
fn check_read(prompter: &Prompter, read: &Value) -> (Vec<u32>, usize) {
    let text = read["text"].as_str().expect("text");
    let tokens = ids(&read["token_ids"]);
    let body = match prompter.bos().filter(|_| prompter.adds_bos()) {
        Some(bos) => {
            assert_eq!(tokens.first(), Some(&bos), "BOS first: {read}");
            &tokens[1..]
        }
        None => &tokens[..],
    };
    assert_eq!(
        prompter.decode(body).unwrap(),
        text,
        "ids decode to the text"
    );
    assert_eq!(
        prompter.tokenize(text).unwrap(),
        body,
        "the text tokenizes to the ids"
    );
    let labels = strings(&read["labels"]);
    let label_ids = ids(&read["label_token_ids"]);
    assert_eq!(labels.len(), label_ids.len(), "{read}");
    for (label, id) in labels.iter().zip(&label_ids) {
        assert_eq!(&prompter.decode(&[*id]).unwrap(), label, "{read}");
    }
    let prefix = read["prefix_tokens"].as_u64().expect("prefix_tokens") as usize;
    assert!(prefix < tokens.len(), "{read}");
    (tokens, prefix)
}

/// A read without `cached_tokens`, which depends on what earlier requests left cached.
fn replayable(read: &Value) -> Value {
    let mut read = read.clone();
    read.as_object_mut().unwrap().remove("cached_tokens");
    read
}

/// The one read of each question of a prompts object keyed by question (answers in order).
fn only_reads<'a>(prompts: impl Iterator<Item = &'a Value>) -> Vec<&'a Value> {
    prompts
        .map(|prompt| {
            let reads = prompt["reads"].as_array().expect("reads");
            assert_eq!(reads.len(), 1, "a direct readout reads once: {prompt}");
            &reads[0]
        })
        .collect()
}

#[test]
fn returned_prompts_are_what_the_model_read() {
    let server = Server::ready(&[]);
    let prompter = prompter();
    let reply = server.post("/v1/decisions", &decisions());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answers = reply.body["answers"].as_array().unwrap();
    let reads = only_reads(answers.iter().map(|a| &a["extra"]["prompt"]));
    let mut total = 0;
    let mut prompts = Vec::new();
    for (answer, read) in answers.iter().zip(&reads) {
        let (tokens, prefix) = check_read(&prompter, read);
        let audit = &answer["extra"]["audit"];
        // The labels read are the answer's label layout; the tokens are its input tokens.
        assert_eq!(read["labels"], audit["label_layout"], "{answer}");
        assert_eq!(audit["input_tokens"], json!(tokens.len()), "{answer}");
        assert_eq!(
            audit["cached_input_tokens"], read["cached_tokens"],
            "{answer}"
        );
        total += tokens.len();
        prompts.push((tokens, prefix));
    }
    assert_eq!(reply.body["usage"]["input_tokens"], json!(total));
    // One shared prefix for the round: the same length and the same tokens in every prompt,
    // as long as it can be (the prompts part right after it), and it is the input's part:
    // the input in it, no question's own text.
    let prefix = prompts[0].1;
    assert!(prompts.iter().all(|(_, p)| *p == prefix), "{prompts:?}");
    let shared = &prompts[0].0[..prefix];
    assert!(prompts.iter().all(|(t, _)| &t[..prefix] == shared));
    assert!(
        prompts
            .iter()
            .any(|(t, _)| t[prefix] != prompts[0].0[prefix]),
        "the prefix stops where the prompts part"
    );
    let prefix_text = prompter.decode(shared).unwrap();
    assert!(prefix_text.contains(TICKET), "{prefix_text:?}");
    for own in [REFUND, TEAM, ANGER] {
        assert!(!prefix_text.contains(own), "{prefix_text:?}");
    }
    let text = reads[0]["text"].as_str().unwrap();
    assert!(text.contains(TICKET) && text.contains(REFUND), "{text:?}");

    // Without the option, no prompt anywhere.
    let mut plain = decisions();
    plain["extra"] = json!({"detail": "full"});
    let reply = server.post("/v1/decisions", &plain);
    assert_eq!(reply.status, 200, "{}", reply.body);
    for answer in reply.body["answers"].as_array().unwrap() {
        assert!(answer["extra"].get("prompt").is_none(), "{answer}");
    }
    // With `detail` none, the prompt is still returned (it was asked for), alone in `extra`.
    let mut bare = decisions();
    bare["extra"] = json!({"detail": "none", "return_prompt": true});
    let reply = server.post("/v1/decisions", &bare);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let extra = &reply.body["answers"][0]["extra"];
    assert_eq!(
        extra.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["prompt"],
        "{extra}"
    );
    // A non-boolean is refused, naming the field.
    let mut wrong = decisions();
    wrong["extra"]["return_prompt"] = json!("yes");
    let reply = server.post("/v1/decisions", &wrong);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(
        reply.body["error"]["param"], "extra.return_prompt",
        "{}",
        reply.body
    );
}

#[test]
fn every_read_of_a_question_is_returned() {
    let server = Server::ready(&[]);
    let prompter = prompter();
    // `permutation` reads the question once per label shift, all in one round.
    let mut request = decisions();
    request["questions"] = json!([decisions()["questions"][1].clone()]);
    request["extra"]["backend_options"] = json!({"permutations": 3});
    let reply = server.post("/v1/decisions", &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    let reads = answer["extra"]["prompt"]["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 3, "{answer}");
    assert_eq!(
        answer["extra"]["audit"]["permutation_shifts"],
        json!([0, 1, 2])
    );
    let checked: Vec<(Vec<u32>, usize)> = reads.iter().map(|r| check_read(&prompter, r)).collect();
    // The shifts show the options in other orders under the same labels.
    assert!(reads.iter().all(|r| r["labels"] == json!(["A", "B", "C"])));
    assert_ne!(reads[0]["text"], reads[1]["text"]);
    let prefix = checked[0].1;
    assert!(checked
        .iter()
        .all(|(t, p)| *p == prefix && t[..prefix] == checked[0].0[..prefix]));
    let total: usize = checked.iter().map(|(t, _)| t.len()).sum();
    assert_eq!(answer["extra"]["audit"]["input_tokens"], json!(total));
    let cached: u64 = reads
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        answer["extra"]["audit"]["cached_input_tokens"],
        json!(cached)
    );
    // The first shift's read computed the shared prefix the others reused.
    assert!(
        reads[1..]
            .iter()
            .all(|r| r["cached_tokens"] == json!(prefix)),
        "{answer}"
    );

    // `two-stage` reads a yes/no question per option, then the finalists: two rounds.
    request["extra"]["backend_options"] = json!({"readout": "two-stage", "shortlist": 2});
    let reply = server.post("/v1/decisions", &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    let reads = answer["extra"]["prompt"]["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 3 + 1, "{answer}");
    for read in &reads[..3] {
        check_read(&prompter, read);
        assert_eq!(read["labels"], json!(["A", "B"]), "{read}");
    }
    check_read(&prompter, &reads[3]);
    assert_eq!(reads[3]["labels"], json!(["A", "B"]), "two finalists");
}

#[test]
fn the_same_question_reads_the_same_tokens_on_every_format() {
    let server = Server::ready(&[]);
    let openai = server.post("/v1/decisions", &decisions());
    assert_eq!(openai.status, 200, "{}", openai.body);
    let jev = server.post("/v1/systemone", &systemone());
    assert_eq!(jev.status, 200, "{}", jev.body);
    let batch = server.post(
        "/v1/systemone/batch",
        &json!({"questions": systemone()["questions"], "items": [{"state": TICKET}], "return_prompt": true}),
    );
    assert_eq!(batch.status, 200, "{}", batch.body);
    let from_openai = only_reads(
        openai.body["answers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| &a["extra"]["prompt"]),
    );
    for prompts in [&jev.body["prompts"], &batch.body["items"][0]["prompts"]] {
        let keys: Vec<&String> = prompts.as_object().expect("prompts by id").keys().collect();
        assert_eq!(keys, ["refund", "team", "anger"], "{prompts}");
        let from_jev = only_reads(prompts.as_object().unwrap().values());
        for (a, b) in from_openai.iter().zip(&from_jev) {
            assert_eq!(
                replayable(a),
                replayable(b),
                "the same prompt, ids and prefix on both formats"
            );
        }
    }

    // A field of /v1/fields is the Jev yes/no question its name and description make.
    let description = "Does the customer ask for a refund?";
    let fields = server.post(
        "/v1/fields",
        &json!({"context": TICKET, "schema": {"refund": {"type": "boolean", "description": description}}, "return_prompt": true}),
    );
    assert_eq!(fields.status, 200, "{}", fields.body);
    let as_jev = server.post(
        "/v1/systemone",
        &json!({"state": TICKET, "questions": {"refund": {"type": "noul", "instructions": format!("Field: refund\n{description}")}}, "return_prompt": true}),
    );
    assert_eq!(as_jev.status, 200, "{}", as_jev.body);
    let read = |body: &Value| replayable(&body["prompts"]["refund"]["reads"][0]);
    assert_eq!(read(&fields.body), read(&as_jev.body));

    // /v1/classify keys its prompts by the fields' pointers, as its decisions name them.
    let classify = server.post(
        "/v1/classify",
        &json!({"state": TICKET, "question": "Triage this ticket.", "return_prompt": true,
                "schema": {"type": "object", "additionalProperties": false, "required": ["refund", "team", "kind"],
                           "properties": {"refund": {"type": "boolean"}, "team": {"enum": ["billing", "shipping"]},
                                          "kind": {"const": "ticket"}}}}),
    );
    assert_eq!(classify.status, 200, "{}", classify.body);
    let prompts = classify.body["prompts"].as_object().expect("prompts");
    assert_eq!(
        prompts.keys().collect::<Vec<_>>(),
        ["/refund", "/team"],
        "fixed fields are not asked: {prompts:?}"
    );
    let prompter = prompter();
    for read in only_reads(prompts.values()) {
        check_read(&prompter, read);
    }
}

#[test]
fn asking_for_the_prompts_changes_no_answer() {
    // No prefix cache: every request reads cold, so equal answers are bit for bit equal.
    let server = Server::ready(&["--prefix-cache-mib", "0"]);
    let without_prompts = |mut body: Value| {
        for answer in body["answers"].as_array_mut().unwrap() {
            let extra = answer["extra"].as_object_mut().unwrap();
            assert!(extra.remove("prompt").is_some(), "{extra:?}");
        }
        body
    };
    let mut plain = decisions();
    plain["extra"]["return_prompt"] = json!(false);
    let a = server.post("/v1/decisions", &plain);
    let b = server.post("/v1/decisions", &decisions());
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(b.status, 200, "{}", b.body);
    let b_answers = without_prompts(b.body.clone());
    assert_eq!(a.body["answers"], b_answers["answers"]);
    assert_eq!(a.body["usage"], b.body["usage"]);

    let mut plain = systemone();
    plain.as_object_mut().unwrap().remove("return_prompt");
    let a = server.post("/v1/systemone", &plain);
    let b = server.post("/v1/systemone", &systemone());
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(b.status, 200, "{}", b.body);
    assert!(a.body.get("prompts").is_none(), "{}", a.body);
    assert!(b.body["prompts"].is_object(), "{}", b.body);
    assert_eq!(a.body["answers"], b.body["answers"]);
    assert_eq!(a.body["usage"], b.body["usage"]);
}

#[test]
fn a_refusal_after_its_read_carries_its_prompt() {
    let server = Server::ready(&[]);
    let prompter = prompter();
    // Between the two answers' option masses: the one below it abstains, the other answers.
    let reply = server.post("/v1/decisions", &decisions());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (low, high) = option_mass_range(&reply.body);
    assert!(
        high - low > 1e-4,
        "the questions' masses differ: {low} vs {high}"
    );
    let mut request = decisions();
    request["extra"]["min_option_mass"] = json!((low + high) / 2.0);
    let reply = server.post("/v1/decisions", &request);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answers = reply.body["answers"].as_array().unwrap();
    let refused: Vec<&Value> = answers.iter().filter(|a| a["type"] == "refusal").collect();
    assert!(!refused.is_empty(), "{}", reply.body);
    for refusal in refused {
        assert_eq!(
            refusal["extra"]["error"]["code"], "low_option_mass",
            "{refusal}"
        );
        let reads = refusal["extra"]["prompt"]["reads"].as_array().unwrap();
        assert_eq!(reads.len(), 1, "{refusal}");
        check_read(&prompter, &reads[0]);
    }
}
