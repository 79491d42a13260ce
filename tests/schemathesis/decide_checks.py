"""decide's own schemathesis checks, loaded by scripts/schemathesis.sh (SCHEMATHESIS_HOOKS).

The built-in checks prove a response matches the document; this one proves what the document
cannot say: every client error explains itself. A validation error (Jev's `detail` list) names
where in the request it is; OpenAI's `missing` and `extra_forbidden` errors name the field in
`param`; every other error has a message; and a 413 names the setting that sets its limit
(`--max-body-bytes`, ...), so the caller knows what an operator could change.
"""

import json

import schemathesis

FIELD_CODES = {"missing", "extra_forbidden"}


def messages(body):
    """The error messages of a decide error body, and a problem with its shape if any."""
    if isinstance(body.get("error"), dict):
        error = body["error"]
        if error.get("code") in FIELD_CODES and not error.get("param"):
            return [], f"a `{error.get('code')}` error without `param`: {error}"
        return [error.get("message")], None
    detail = body.get("detail")
    if isinstance(detail, list):
        if not detail:
            return [], "an empty `detail` list"
        for entry in detail:
            if not entry.get("loc"):
                return [], f"a validation error without `loc`: {entry}"
        return [entry.get("msg") for entry in detail], None
    if isinstance(detail, dict):
        return [detail.get("message")], None
    return [], "neither OpenAI's `error` nor Jev's `detail`"


@schemathesis.check
def errors_explain_themselves(ctx, response, case):
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{response.status_code} without a JSON body: {response.content[:200]!r}")
    if not isinstance(body, dict):
        raise AssertionError(f"{response.status_code}: not an object: {body!r}"[:300])
    texts, problem = messages(body)
    if problem:
        raise AssertionError(f"{response.status_code}: {problem}"[:500])
    if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise AssertionError(f"{response.status_code} without a message: {body}"[:500])
    if response.status_code == 413 and not any("--" in t for t in texts):
        raise AssertionError(f"a 413 that names no setting: {texts[0]}"[:500])
    return None
