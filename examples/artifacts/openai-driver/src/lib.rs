//! The OpenAI-compatible inference driver (`runtime: driver`): answers a driver
//! request (docs/drivers.md) by calling `POST <endpoint>/chat/completions` (or,
//! with `api: responses`, `POST <endpoint>/responses`) over wasi:http,
//! streaming text through `murmur:text/chunks`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:tool/tool@0.1.0",
    generate_all,
});

mod answer;
mod config;
mod http;
mod request;
mod sse;

use answer::{Answer, ChatStream, Piece, clip, parse_json};
use config::{Api, MODEL_VAR, Settings};
use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::text::chunks;
use request::DriverRequest;
use wasi::http::types::IncomingResponse;

/// How much of an error response is read, and how much of it is shown.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
const ERROR_BODY_SHOWN: usize = 500;

struct Driver;

impl Guest for Driver {
    fn run(input: ToolInput) -> ToolResult {
        match drive(input.data.as_deref()) {
            Ok((answer, metadata)) => ToolResult {
                status: Status::Passed,
                summary: Some(answer.summary()),
                data: Some(answer.data().to_string()),
                data_path: None,
                truncated: false,
                metadata,
            },
            Err(summary) => ToolResult {
                status: Status::Error,
                summary: Some(summary),
                data: None,
                data_path: None,
                truncated: false,
                metadata: Vec::new(),
            },
        }
    }
}

/// One model turn: the answer and the result metadata, or why there is none.
fn drive(data: Option<&str>) -> Result<(Answer, Vec<(String, String)>), String> {
    let request = DriverRequest::parse(data)?;
    let settings = Settings::from_env()?;
    let model = request
        .model_or(settings.model.as_deref())
        .ok_or_else(|| format!("no model: set inference.model in murmur.yaml ({MODEL_VAR})"))?;
    let responses = settings.config.api == Api::Responses;
    // The Responses API is spoken whole (one JSON answer).
    let stream = settings.config.stream && request.stream && !responses;
    let body = if responses {
        request.responses_body(model, &settings.config)
    } else {
        request.chat_body(model, &settings.config, stream)
    };
    let url = settings.url();
    let response = http::post(&url, &settings.headers(stream), body.to_string().as_bytes())?;

    let status = response.status();
    if !(200..300).contains(&status) {
        let body = http::read_to_end(response, &url, ERROR_BODY_LIMIT).unwrap_or_default();
        return Err(status_message(status, &body));
    }
    let mut emit = |piece: Piece<'_>| {
        if request.stream {
            emit_piece(piece);
        }
    };
    let answer = if responses {
        let body = http::read_to_end(response, &url, usize::MAX)?;
        Answer::from_responses(&parse_json(&body, "an answer")?, &mut emit)?
    } else if stream && !http::is_json(&response) {
        read_stream(response, &url, &mut emit)?
    } else {
        read_whole(response, &url, &mut emit)?
    };

    // The Responses API keeps the conversation: the next turn goes on from
    // this response.
    let metadata = match &answer.id {
        Some(id) if settings.config.continuation || responses => {
            vec![("continuation_id".to_string(), id.clone())]
        }
        _ => Vec::new(),
    };
    Ok((answer, metadata))
}

fn read_stream(
    response: IncomingResponse,
    url: &str,
    emit: &mut impl FnMut(Piece<'_>),
) -> Result<Answer, String> {
    let mut stream = ChatStream::default();
    http::read_body(response, url, |bytes| stream.feed(bytes, emit))?;
    stream.finish(emit)
}

fn read_whole(
    response: IncomingResponse,
    url: &str,
    emit: &mut impl FnMut(Piece<'_>),
) -> Result<Answer, String> {
    let body = http::read_to_end(response, url, usize::MAX)?;
    Answer::from_response(&parse_json(&body, "an answer")?, emit)
}

fn emit_piece(piece: Piece<'_>) {
    match piece {
        Piece::Text(text) => chunks::emit_chunk(text),
        Piece::Thinking(text) => chunks::emit_thinking_chunk(text),
    }
}

/// `inference endpoint returned <status>: <start of the body>`.
fn status_message(status: u16, body: &[u8]) -> String {
    let body = String::from_utf8_lossy(body);
    let body = clip(body.trim(), ERROR_BODY_SHOWN);
    if body.is_empty() {
        format!("inference endpoint returned {status}")
    } else {
        format!("inference endpoint returned {status}: {body}")
    }
}

export!(Driver);
