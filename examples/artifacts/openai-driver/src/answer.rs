//! The model's answer, assembled from one Chat Completions response or from its
//! stream of chunks, and the `tool-result.data` made from it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde_json::{Value, json};

use crate::request::non_empty_arguments;
use crate::sse::{Event, Lines, event};

/// Text to pass on while the answer comes in.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Thinking(&'a str),
}

#[derive(Debug, Default)]
pub struct Answer {
    /// The response `id` (the first one seen).
    pub id: Option<String>,
    text: String,
    calls: BTreeMap<u64, CallParts>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

/// A tool call, possibly still arriving in fragments.
#[derive(Debug, Default)]
struct CallParts {
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
}

impl Answer {
    /// Reads a whole (non-streamed) response; `emit` gets its text and reasoning at once.
    pub fn from_response(
        response: &Value,
        emit: &mut impl FnMut(Piece<'_>),
    ) -> Result<Self, String> {
        check_error(response)?;
        let mut answer = Self::default();
        answer.note_envelope(response);
        let choice = first_choice(response).ok_or("inference endpoint answered without choices")?;
        let message = choice
            .get("message")
            .ok_or("inference endpoint answered without a message")?;
        if let Some(thinking) = reasoning(message) {
            emit(Piece::Thinking(thinking));
        }
        answer.text = content_text(message.get("content"));
        if !answer.text.is_empty() {
            emit(Piece::Text(&answer.text));
        }
        let calls = message.get("tool_calls").and_then(Value::as_array);
        for (position, call) in calls.into_iter().flatten().enumerate() {
            answer.merge_call(Some(position as u64), call);
        }
        answer.note_finish(choice);
        Ok(answer)
    }

    /// Reads a Responses API response: its `output` items (messages, function
    /// calls, reasoning summaries), `usage` and `status`.
    pub fn from_responses(
        response: &Value,
        emit: &mut impl FnMut(Piece<'_>),
    ) -> Result<Self, String> {
        check_error(response)?;
        let mut answer = Self {
            id: str_at(response, "id").map(str::to_string),
            ..Self::default()
        };
        let output = response["output"]
            .as_array()
            .ok_or("inference endpoint answered without output")?;
        for item in output {
            match str_at(item, "type") {
                Some("message") => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        if let Some(text) = str_at(part, "text") {
                            answer.text.push_str(text);
                        }
                    }
                }
                Some("function_call") => {
                    let slot = answer.calls.len() as u64;
                    answer.calls.insert(
                        slot,
                        CallParts {
                            id: str_at(item, "call_id").map(str::to_string),
                            name: str_at(item, "name").unwrap_or_default().to_string(),
                            arguments: str_at(item, "arguments").unwrap_or_default().to_string(),
                        },
                    );
                }
                Some("reasoning") => {
                    for part in item["summary"].as_array().into_iter().flatten() {
                        if let Some(text) = str_at(part, "text") {
                            emit(Piece::Thinking(text));
                        }
                    }
                }
                _ => {}
            }
        }
        if !answer.text.is_empty() {
            emit(Piece::Text(&answer.text));
        }
        let truncated = str_at(response, "status") == Some("incomplete")
            && response["incomplete_details"]["reason"] == "max_output_tokens";
        answer.finish_reason = Some(
            if !answer.calls.is_empty() {
                "tool_calls"
            } else if truncated {
                "length"
            } else {
                "stop"
            }
            .to_string(),
        );
        let usage = &response["usage"];
        if let (Some(input_tokens), Some(output_tokens)) = (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64(),
        ) {
            answer.usage = Some(Usage {
                input_tokens,
                output_tokens,
            });
        }
        Ok(answer)
    }

    /// Adds one streamed chunk; `emit` gets its text and reasoning deltas.
    pub fn apply_chunk(
        &mut self,
        chunk: &Value,
        emit: &mut impl FnMut(Piece<'_>),
    ) -> Result<(), String> {
        check_error(chunk)?;
        self.note_envelope(chunk);
        let Some(choice) = first_choice(chunk) else {
            return Ok(());
        };
        if let Some(delta) = choice.get("delta") {
            self.apply_delta(delta, emit);
        }
        self.note_finish(choice);
        Ok(())
    }

    fn apply_delta(&mut self, delta: &Value, emit: &mut impl FnMut(Piece<'_>)) {
        if let Some(thinking) = reasoning(delta) {
            emit(Piece::Thinking(thinking));
        }
        if let Some(text) = str_at(delta, "content").filter(|text| !text.is_empty()) {
            self.text.push_str(text);
            emit(Piece::Text(text));
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            let index = call.get("index").and_then(Value::as_u64);
            self.merge_call(index, call);
        }
    }

    /// The response id and usage, wherever in the stream they come.
    fn note_envelope(&mut self, value: &Value) {
        if self.id.is_none() {
            self.id = str_at(value, "id")
                .filter(|id| !id.is_empty())
                .map(String::from);
        }
        if let Some(usage) = value.get("usage").filter(|usage| usage.is_object()) {
            let tokens = |key| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: tokens("prompt_tokens"),
                output_tokens: tokens("completion_tokens"),
            });
        }
    }

    fn note_finish(&mut self, choice: &Value) {
        if let Some(reason) = str_at(choice, "finish_reason") {
            self.finish_reason = Some(reason.to_string());
        }
    }

    /// Adds a tool call or a fragment of one to the call at `index`.
    fn merge_call(&mut self, index: Option<u64>, call: &Value) {
        let id = str_at(call, "id").filter(|id| !id.is_empty());
        let index = index.unwrap_or_else(|| self.slot_for(id));
        let parts = self.calls.entry(index).or_default();
        if parts.id.is_none() {
            parts.id = id.map(String::from);
        }
        let function = call.get("function");
        if let Some(name) = function.and_then(|function| str_at(function, "name")) {
            // Servers send the name once; some repeat it in every fragment.
            if parts.name != name {
                parts.name.push_str(name);
            }
        }
        match function.and_then(|function| function.get("arguments")) {
            Some(Value::String(fragment)) => parts.arguments.push_str(fragment),
            Some(Value::Null) | None => {}
            // Some servers send the arguments as an object.
            Some(other) => parts.arguments.push_str(&other.to_string()),
        }
    }

    /// Where a fragment without an `index` belongs: a new call when it brings a new id.
    fn slot_for(&self, id: Option<&str>) -> u64 {
        match (self.calls.last_key_value(), id) {
            (None, _) => 0,
            (Some((&last, parts)), Some(id)) if parts.id.as_deref() != Some(id) => last + 1,
            (Some((&last, _)), _) => last,
        }
    }

    /// `end_turn`, `tool_use`, `max_tokens` or `other`.
    pub fn stop_reason(&self) -> &'static str {
        match self.finish_reason.as_deref() {
            Some("stop") => "end_turn",
            Some("tool_calls") => "tool_use",
            Some("length") => "max_tokens",
            _ => "other",
        }
    }

    /// `tool-result.data`: text, tool calls, stop reason and (when reported) usage.
    pub fn data(&self) -> Value {
        let calls = self.calls.iter().map(|(index, parts)| {
            json!({
                "id": parts.id.clone().unwrap_or_else(|| format!("call_{index}")),
                "name": parts.name,
                "arguments": non_empty_arguments(&parts.arguments),
            })
        });
        let mut data = json!({
            "text": (!self.text.is_empty()).then_some(self.text.as_str()),
            "tool_calls": calls.collect::<Vec<_>>(),
            "stop_reason": self.stop_reason(),
        });
        if let Some(usage) = self.usage {
            data["usage"] = json!({
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            });
        }
        data
    }

    /// `tool-result.summary`.
    pub fn summary(&self) -> String {
        match self.calls.len() {
            0 => format!("model answered ({})", self.stop_reason()),
            1 => format!("model answered ({}, 1 tool call)", self.stop_reason()),
            n => format!("model answered ({}, {n} tool calls)", self.stop_reason()),
        }
    }
}

/// A streamed answer being read: bytes in, events applied.
#[derive(Debug, Default)]
pub struct ChatStream {
    answer: Answer,
    lines: Lines,
    events: usize,
    done: bool,
}

impl ChatStream {
    /// Takes the next bytes of the body; breaks at `data: [DONE]`.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        emit: &mut impl FnMut(Piece<'_>),
    ) -> Result<ControlFlow<()>, String> {
        for line in self.lines.push(bytes) {
            self.line(&line, emit)?;
            if self.done {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The answer, once the body has ended (or `[DONE]` came).
    pub fn finish(mut self, emit: &mut impl FnMut(Piece<'_>)) -> Result<Answer, String> {
        if !self.done
            && let Some(line) = self.lines.finish()
        {
            self.line(&line, emit)?;
        }
        if self.events == 0 {
            return Err("inference endpoint ended the stream without sending an answer".into());
        }
        Ok(self.answer)
    }

    fn line(&mut self, line: &str, emit: &mut impl FnMut(Piece<'_>)) -> Result<(), String> {
        match event(line) {
            Some(Event::Data(json)) => {
                self.events += 1;
                let chunk = parse_json(json.as_bytes(), "an event")?;
                self.answer.apply_chunk(&chunk, emit)
            }
            Some(Event::Done) => {
                self.done = true;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// The JSON of an event or a response, as a clear error when it is not JSON.
pub fn parse_json(text: &[u8], what: &str) -> Result<Value, String> {
    serde_json::from_slice(text).map_err(|e| {
        let text = String::from_utf8_lossy(text);
        format!(
            "inference endpoint sent {what} that is not JSON ({e}): {}",
            clip(&text, 200)
        )
    })
}

/// At most the first `max` characters of `text`.
pub fn clip(text: &str, max: usize) -> &str {
    text.char_indices()
        .nth(max)
        .map_or(text, |(end, _)| &text[..end])
}

/// `error` in a response or an event: the server gave up.
fn check_error(value: &Value) -> Result<(), String> {
    let Some(error) = value.get("error").filter(|error| !error.is_null()) else {
        return Ok(());
    };
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or(error.as_str())
        .map_or_else(|| error.to_string(), String::from);
    Err(format!(
        "inference endpoint reported an error: {}",
        clip(&message, 500)
    ))
}

fn first_choice(value: &Value) -> Option<&Value> {
    value.get("choices")?.as_array()?.first()
}

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key)?.as_str()
}

/// `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (Ollama, OpenRouter).
fn reasoning(value: &Value) -> Option<&str> {
    str_at(value, "reasoning_content")
        .or_else(|| str_at(value, "reasoning"))
        .filter(|text| !text.is_empty())
}

/// Message content: a string, or a list of `{"type": "text", "text": …}` parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| str_at(part, "text"))
            .collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(body: &str, cut: usize) -> (Result<Answer, String>, Vec<String>) {
        let mut pieces = Vec::new();
        let mut emit = |piece: Piece<'_>| {
            pieces.push(match piece {
                Piece::Text(text) => format!("text:{text}"),
                Piece::Thinking(text) => format!("thinking:{text}"),
            });
        };
        let mut chat = ChatStream::default();
        let bytes = body.as_bytes();
        let mut answer = Ok(());
        for part in [&bytes[..cut], &bytes[cut..]] {
            match chat.feed(part, &mut emit) {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => break,
                Err(e) => {
                    answer = Err(e);
                    break;
                }
            }
        }
        let answer = answer.and_then(|()| chat.finish(&mut emit));
        (answer, pieces)
    }

    const TOOL_STREAM: &str = concat!(
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hm\"}}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me \"}}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"check.\"}}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"echo-tool\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"text\\\":\"}}]}}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"hi\\\"}\"}},{\"index\":1,\"function\":{\"name\":\"skill\"}}]}}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"resp_1\",\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":64}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn stream_assembles_text_tool_calls_and_usage() {
        for cut in 0..TOOL_STREAM.len() {
            let (answer, pieces) = stream(TOOL_STREAM, cut);
            let answer = answer.expect("valid stream");
            assert_eq!(pieces, ["thinking:hm", "text:Let me ", "text:check."]);
            assert_eq!(answer.id.as_deref(), Some("resp_1"));
            assert_eq!(
                answer.data(),
                json!({
                    "text": "Let me check.",
                    "tool_calls": [
                        {"id": "call_a", "name": "echo-tool", "arguments": "{\"text\":\"hi\"}"},
                        {"id": "call_1", "name": "skill", "arguments": "{}"}
                    ],
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": 812, "output_tokens": 64}
                })
            );
            assert_eq!(answer.summary(), "model answered (tool_use, 2 tool calls)");
        }
    }

    #[test]
    fn stream_errors_are_explained() {
        let body = "data: {\"error\":{\"message\":\"model not found\"}}\n\n";
        let (answer, _) = stream(body, 0);
        let err = answer.expect_err("error event");
        assert_eq!(err, "inference endpoint reported an error: model not found");
        let (answer, _) = stream("data: {oops\n", 3);
        assert!(answer.expect_err("bad event").contains("not JSON"));
        let (answer, _) = stream(": nothing\n", 0);
        assert!(answer.is_err());
    }

    #[test]
    fn whole_response() {
        let response = json!({
            "id": "chatcmpl-9",
            "choices": [{"index": 0, "finish_reason": "length", "message": {
                "role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "t", "arguments": {"a": 1}}}]
            }}]
        });
        let mut pieces = 0;
        let answer = Answer::from_response(&response, &mut |_| pieces += 1).expect("valid");
        assert_eq!(pieces, 0);
        assert_eq!(
            answer.data(),
            json!({
                "text": null,
                "tool_calls": [{"id": "call_0", "name": "t", "arguments": "{\"a\":1}"}],
                "stop_reason": "max_tokens"
            })
        );
        let response = json!({"choices": [{"finish_reason": "stop", "message": {"content": "hi"}}],
                              "usage": {"prompt_tokens": 3, "completion_tokens": 1}});
        let answer = Answer::from_response(&response, &mut |_| {}).expect("valid");
        assert_eq!(answer.summary(), "model answered (end_turn)");
        assert_eq!(answer.data()["usage"]["input_tokens"], 3);
        assert!(Answer::from_response(&json!({"choices": []}), &mut |_| {}).is_err());
    }
}
