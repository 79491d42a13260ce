//! Reading a request body: size limit, `Content-Encoding: zstd`, and `multipart/form-data`.
//!
//! TypeSafe's SDK compresses bodies of 1 KiB or more with zstd and sends `multipart/form-data`
//! (a JSON `request` part plus image parts) when a request carries assets. The compressed size
//! and the decompressed size are both held to `--max-body-bytes`, so a small compressed body
//! cannot expand into an unbounded one.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use serde_json::Value;

use crate::error::ApiError;

/// Reads the body as one JSON value within `limit` bytes.
///
/// `multipart/form-data` is accepted when `multipart` is true: its `request` part is the JSON
/// body; any other part is an asset, refused because this server has no vision model.
pub async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    multipart: bool,
) -> Result<Value, ApiError> {
    let raw = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large(limit))?;
    let bytes = decode(headers, raw, limit)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let json = if content_type
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        if !multipart {
            return Err(ApiError::UnsupportedMedia {
                message:
                    "multipart/form-data is not accepted on this endpoint; send application/json"
                        .into(),
            });
        }
        request_part(content_type, bytes).await?
    } else {
        bytes
    };
    if json.is_empty() {
        return Err(ApiError::invalid(
            vec![],
            "the request body is empty; send a JSON object",
        ));
    }
    serde_json::from_slice(&json).map_err(|error| ApiError::Invalid {
        loc: vec![],
        message: format!("the request body is not valid JSON: {error}"),
        kind: "json_invalid",
    })
}

fn too_large(limit: usize) -> ApiError {
    ApiError::TooLarge {
        loc: vec![],
        message: format!("the request body exceeds the limit of {limit} bytes (setting --max-body-bytes / DECIDE_MAX_BODY_BYTES)"),
    }
}

/// Undoes `Content-Encoding` (identity or zstd).
fn decode(headers: &HeaderMap, raw: Bytes, limit: usize) -> Result<Bytes, ApiError> {
    let Some(encoding) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(raw);
    };
    let encoding = encoding.to_str().unwrap_or("?").trim().to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(raw),
        "zstd" => {
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(raw.as_ref()).map_err(|error| {
                    ApiError::invalid(
                        vec![],
                        format!("the zstd-compressed body cannot be decoded: {error}"),
                    )
                })?;
            let mut out = Vec::new();
            decoder
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|error| {
                    ApiError::invalid(
                        vec![],
                        format!("the zstd-compressed body cannot be decoded: {error}"),
                    )
                })?;
            if out.len() > limit {
                return Err(too_large(limit));
            }
            Ok(Bytes::from(out))
        }
        other => Err(ApiError::UnsupportedMedia {
            message: format!(
                "Content-Encoding `{other}` is not supported; send zstd or an uncompressed body"
            ),
        }),
    }
}

/// The `request` part of a multipart body.
async fn request_part(content_type: &str, bytes: Bytes) -> Result<Bytes, ApiError> {
    let boundary = multer::parse_boundary(content_type).map_err(|error| {
        ApiError::invalid(
            vec![],
            format!("multipart/form-data without a valid boundary: {error}"),
        )
    })?;
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(bytes) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut request = None;
    loop {
        let field = multipart.next_field().await.map_err(|error| {
            ApiError::invalid(
                vec![],
                format!("malformed multipart/form-data body: {error}"),
            )
        })?;
        let Some(field) = field else { break };
        let name = field.name().unwrap_or("").to_string();
        if name == "request" {
            let data = field.bytes().await.map_err(|error| {
                ApiError::invalid(
                    vec![],
                    format!("malformed multipart part `request`: {error}"),
                )
            })?;
            request = Some(data);
        } else {
            return Err(ApiError::invalid(
                crate::loc!["assets"],
                format!("assets: part `{name}` is an asset; assets are not supported: this server has no vision model"),
            ));
        }
    }
    request.ok_or_else(|| {
        ApiError::invalid(vec![], "multipart/form-data body without a `request` part")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    // A zstd frame of `{"a":1}` (made with the zstd CLI: `printf '{"a":1}' | zstd -c`).
    const ZSTD_A1: &[u8] = &[
        0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x39, 0x00, 0x00, 0x7b, 0x22, 0x61, 0x22, 0x3a, 0x31,
        0x7d, 0x48, 0x8b, 0xfc, 0x32,
    ];

    #[tokio::test]
    async fn zstd_bodies_are_decoded() {
        let value = read_json(
            &headers(&[("content-encoding", "zstd")]),
            Body::from(ZSTD_A1),
            1000,
            false,
        )
        .await;
        match value {
            Ok(value) => assert_eq!(value, serde_json::json!({"a": 1})),
            Err(error) => panic!("{error}"),
        }
    }

    #[tokio::test]
    async fn unknown_encodings_and_garbage_are_4xx() {
        let gzip = read_json(
            &headers(&[("content-encoding", "gzip")]),
            Body::from("x"),
            1000,
            false,
        )
        .await
        .unwrap_err();
        assert!(matches!(gzip, ApiError::UnsupportedMedia { .. }));
        let garbage = read_json(
            &headers(&[("content-encoding", "zstd")]),
            Body::from("not zstd"),
            1000,
            false,
        )
        .await
        .unwrap_err();
        assert!(matches!(garbage, ApiError::Invalid { .. }), "{garbage:?}");
    }

    #[tokio::test]
    async fn multipart_request_part_is_the_body_and_assets_are_refused() {
        let body = "--b\r\nContent-Disposition: form-data; name=\"request\"\r\nContent-Type: application/json\r\n\r\n{\"x\":2}\r\n--b--\r\n";
        let value = read_json(
            &headers(&[("content-type", "multipart/form-data; boundary=b")]),
            Body::from(body),
            1000,
            true,
        )
        .await
        .unwrap();
        assert_eq!(value, serde_json::json!({"x": 2}));
        let with_asset = "--b\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{}\r\n--b\r\nContent-Disposition: form-data; name=\"asset-0\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\nPNG\r\n--b--\r\n";
        let error = read_json(
            &headers(&[("content-type", "multipart/form-data; boundary=b")]),
            Body::from(with_asset),
            1000,
            true,
        )
        .await
        .unwrap_err();
        assert!(error.to_string().contains("no vision model"), "{error}");
    }

    #[tokio::test]
    async fn oversized_bodies_name_the_setting() {
        let error = read_json(&HeaderMap::new(), Body::from(vec![b' '; 50]), 10, false)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("--max-body-bytes"));
    }
}
