//! Test tool (`murmur:tool/run@0.1.0`): echoes its input. `data` of `spin` loops
//! forever (deadline tests), `panic` panics, `chunks` streams two text chunks,
//! `fetch:<authority>` makes a wasi:http GET to `http://<authority>/` and
//! answers with the outcome; `{"ask": "<prompt>"}` emits a thinking chunk,
//! asks the A2A client for input (`murmur:task/task`) and answers with it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:tool/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Tool;

impl Guest for Tool {
    fn run(input: ToolInput) -> ToolResult {
        let data = input.data.unwrap_or_default();
        match data.as_str() {
            "spin" => loop {
                std::hint::black_box(0u64);
            },
            "panic" => panic!("echo-tool was asked to panic"),
            "chunks" => {
                murmur::text::chunks::emit_chunk("chunk-one ");
                murmur::text::chunks::emit_chunk("chunk-two\n");
            }
            _ => {}
        }
        // `{"ask": "<prompt>"}`: thinks aloud, asks the A2A client, answers
        // with what it said.
        if let Some(prompt) = data
            .split_once(r#""ask":""#)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(prompt, _)| prompt)
        {
            murmur::text::chunks::emit_thinking_chunk("considering what to ask");
            let answer = murmur::task::task::request_input(prompt);
            return ToolResult {
                status: Status::Passed,
                summary: Some("asked".into()),
                data: Some(format!("the client said: {answer}")),
                data_path: None,
                truncated: false,
                metadata: Vec::new(),
            };
        }
        if let Some(authority) = data.strip_prefix("fetch:") {
            let outcome = fetch(authority);
            return ToolResult {
                status: Status::Passed,
                summary: Some("fetch".into()),
                data: Some(outcome),
                data_path: None,
                truncated: false,
                metadata: Vec::new(),
            };
        }
        ToolResult {
            status: Status::Passed,
            summary: Some("echo".into()),
            data: Some(data),
            data_path: None,
            truncated: false,
            metadata: vec![("tool".into(), "echo-tool".into())],
        }
    }
}

/// One GET of `http://<authority>/`: `status:<code>` or `error:<why>`.
fn fetch(authority: &str) -> String {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};
    let request = OutgoingRequest::new(Fields::new());
    if request.set_scheme(Some(&Scheme::Http)).is_err()
        || request.set_authority(Some(authority)).is_err()
        || request.set_path_with_query(Some("/")).is_err()
    {
        return "error:invalid request".into();
    }
    let future = match outgoing_handler::handle(request, None) {
        Ok(f) => f,
        Err(e) => return format!("error:{e:?}"),
    };
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => format!("status:{}", response.status()),
        Some(Ok(Err(e))) => format!("error:{e:?}"),
        _ => "error:no response".into(),
    }
}

export!(Tool);
