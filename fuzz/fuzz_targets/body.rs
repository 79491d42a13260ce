//! Request bodies as the server reads them (`frontends/body.rs`): size limit, `Content-Encoding`
//! (identity, zstd, anything else refused) and `multipart/form-data`.
//!
//! Input: optional header lines (`content-type: ...`, `content-encoding: ...`), a blank line,
//! then the body; an input without a blank line is a body without those headers. The seed
//! corpus holds real bodies this way.
//!
//! Asserts, besides no panic: errors are 4xx and render as error bodies; an uncompressed,
//! non-multipart body reads as exactly its JSON; whether multipart is allowed changes nothing
//! for other content types, and multipart where it is not allowed is a 415; the same body
//! compressed with zstd reads the same; a body over the limit, raw or once decompressed, is a
//! 413.
#![no_main]

use decide_server::fuzzing::{read_body, ApiError, Wire};
use decide_fuzz::check_error;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The limit bodies are read under (the server's default is 4 MiB; inputs are far smaller).
const LIMIT: usize = 1 << 20;

/// A result as comparable as its parts allow: the value, or the error's status.
fn outcome(result: &Result<Value, ApiError>) -> Result<&Value, u16> {
    result
        .as_ref()
        .map_err(|error| error.status(Wire::SystemOne).as_u16())
}

fn checked(result: Result<Value, ApiError>) -> Result<Value, u16> {
    match result {
        Ok(value) => Ok(value),
        Err(error) => {
            let status = error.status(Wire::SystemOne).as_u16();
            // A body error points at the body as a whole, or at `assets` (an asset part).
            check_error(error, Wire::SystemOne, &serde_json::json!({"assets": null}));
            Err(status)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (&[][..], data),
    };
    let mut content_type: Option<&[u8]> = None;
    let mut content_encoding: Option<&[u8]> = None;
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        match line[..colon].to_ascii_lowercase().as_slice() {
            b"content-type" => content_type = Some(value),
            b"content-encoding" => content_encoding = Some(value),
            _ => {}
        }
    }
    // What the server will see: a header value HTTP cannot carry is not sent at all.
    fn valid(v: Option<&[u8]>) -> Option<&[u8]> {
        v.filter(|v| v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)))
    }
    let (content_type, content_encoding) = (valid(content_type), valid(content_encoding));
    // The server reads a header only when it is visible ASCII (`HeaderValue::to_str`): a
    // content type that is not reads as none, an encoding that is not as unsupported.
    let text = |v: &[u8]| {
        v.iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
            .then(|| String::from_utf8_lossy(v).to_ascii_lowercase())
    };
    let is_multipart = content_type
        .and_then(text)
        .is_some_and(|ct| ct.starts_with("multipart/form-data"));
    let identity = match content_encoding {
        None => true,
        Some(e) => text(e).is_some_and(|e| matches!(e.trim(), "" | "identity")),
    };

    let allowed = read_body(content_type, content_encoding, body.to_vec(), LIMIT, true);
    let refused = read_body(content_type, content_encoding, body.to_vec(), LIMIT, false);
    if is_multipart {
        // Decoding comes first: a body that does not decode fails before its type is looked at.
        if let Err(error) = &refused {
            let status = error.status(Wire::SystemOne).as_u16();
            assert!(
                status == 415 || allowed.is_err(),
                "multipart where refused: {error:?}"
            );
        } else {
            panic!("a multipart body was read where multipart is refused");
        }
    } else {
        assert_eq!(
            outcome(&allowed),
            outcome(&refused),
            "multipart allowed changed a plain body"
        );
        if identity {
            let plain: Result<Value, _> = serde_json::from_slice(body);
            match (&allowed, plain) {
                (Ok(read), Ok(plain)) => assert_eq!(*read, plain),
                (Err(_), Err(_)) => {}
                (Ok(read), Err(e)) => panic!("read {read} from a body that is not JSON: {e}"),
                (Err(error), Ok(plain)) => {
                    // An empty-looking body is refused as empty, never one that is JSON.
                    panic!("refused a JSON body {plain}: {error:?}")
                }
            }
        }
    }
    let allowed = checked(allowed);
    checked(refused).ok();

    if identity && !body.is_empty() {
        let compressed =
            ruzstd::encoding::compress_to_vec(body, ruzstd::encoding::CompressionLevel::Fastest);
        let zstd = checked(read_body(
            content_type,
            Some(b"zstd"),
            compressed.clone(),
            LIMIT,
            true,
        ));
        assert_eq!(zstd, allowed, "the zstd-compressed body reads differently");
        // Under a limit the decompressed body exceeds: 413, whatever the compressed size.
        let limit = body.len() - 1;
        let small = read_body(content_type, Some(b"zstd"), compressed, limit, true);
        match small {
            Err(ApiError::TooLarge { .. }) => {}
            other => panic!(
                "a body of {} bytes under a limit of {limit}: {other:?}",
                body.len()
            ),
        }
    }
    if body.len() > 1 {
        let limit = body.len() - 1;
        match read_body(content_type, content_encoding, body.to_vec(), limit, true) {
            Err(ApiError::TooLarge { .. }) => {}
            other => panic!(
                "a raw body of {} bytes under a limit of {limit}: {other:?}",
                body.len()
            ),
        }
    }
});
