//! `GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shape or, for requests with an
//! `anthropic-version` header, Anthropic's.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};

use super::AppState;
use super::error::Api;

fn model_json(state: &AppState, id: &str, anthropic: bool) -> Json {
    if anthropic {
        json!({"type": "model", "id": id, "display_name": id, "created_at": rfc3339(state.created)})
    } else {
        json!({"id": id, "object": "model", "created": state.created, "owned_by": "vkllm"})
    }
}

/// `GET /v1/models`: OpenAI's list, or Anthropic's when the request has `anthropic-version`.
pub async fn list(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let id = state.model_id();
    if headers.contains_key("anthropic-version") {
        return axum::Json(json!({
            "data": [model_json(&state, id, true)],
            "has_more": false,
            "first_id": id,
            "last_id": id,
        }))
        .into_response();
    }
    axum::Json(json!({"object": "list", "data": [model_json(&state, id, false)]})).into_response()
}

/// `GET /v1/models/{id}`.
pub async fn one(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let anthropic = headers.contains_key("anthropic-version");
    let api = if anthropic {
        Api::Anthropic
    } else {
        Api::OpenAi
    };
    match state.check_model(api, &id) {
        Ok(()) => axum::Json(model_json(&state, &id, anthropic)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `secs` since the epoch as an RFC 3339 UTC time.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC (a leap day).
        assert_eq!(rfc3339(951_827_696), "2000-02-29T12:34:56Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
    }
}
