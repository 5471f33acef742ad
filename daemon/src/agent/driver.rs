//! The inference driver protocol (docs/drivers.md): the JSON a driver takes in
//! `tool-input.data` and answers in `tool-result.data`.

use serde::{Deserialize, Serialize};

/// Version of the request format.
pub const PROTOCOL: u32 = 1;

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The files a user's message carried (an A2A task's `raw` and `url`
    /// parts), for a model API that takes them; `content` names each too,
    /// so a driver that ignores them still tells the model it was sent one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// A file of a user's message: its bytes (`data`, base64) or its `url`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub media_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Attachment {
    /// The files among an A2A message's parts (1.0 Part objects); one
    /// without a media type is `application/octet-stream`.
    pub fn of_parts(parts: &[serde_json::Value]) -> Vec<Self> {
        parts
            .iter()
            .filter_map(|p| {
                let data = p["raw"].as_str().map(str::to_string);
                let url = p["url"].as_str().map(str::to_string);
                (data.is_some() || url.is_some()).then(|| Self {
                    media_type: p["mediaType"]
                        .as_str()
                        .unwrap_or("application/octet-stream")
                        .to_string(),
                    filename: p["filename"].as_str().map(str::to_string),
                    data,
                    url,
                })
            })
            .collect()
    }
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            attachments: Vec::new(),
        }
    }

    pub fn assistant(text: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: "assistant".into(),
            content: text,
            tool_calls,
            tool_call_id: None,
            name: None,
            attachments: Vec::new(),
        }
    }

    pub fn tool(call: &ToolCall, content: String) -> Self {
        Self {
            role: "tool".into(),
            content: Some(content),
            tool_calls: Vec::new(),
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            attachments: Vec::new(),
        }
    }

    /// Rough size in bytes (for the trace and compaction notes).
    pub fn len(&self) -> usize {
        self.content.as_ref().map_or(0, String::len)
            + self
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tool call the model asked for; `arguments` is a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// Limits passed to the driver.
#[derive(Debug, Clone, Serialize)]
pub struct InferenceLimits {
    pub max_output_tokens: Option<u64>,
    /// `context.max_tokens` (absent when unknown).
    pub context_tokens: Option<u64>,
}

/// Why a driver is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    Turn,
    Compaction,
}

/// `tool-input.data` of a driver call.
#[derive(Debug, Clone, Serialize)]
pub struct Request<'a> {
    pub protocol: u32,
    pub purpose: Purpose,
    pub model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<&'a str>,
    pub messages: &'a [Message],
    pub tools: &'a [ToolDef],
    pub limits: &'a InferenceLimits,
    pub continuation_id: Option<&'a str>,
    pub stream: bool,
}

/// Token counts a model server reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// `tool-result.data` of a driver call.
#[derive(Debug, Clone, Deserialize)]
pub struct Response {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default = "other")]
    pub stop_reason: String,
    #[serde(default)]
    pub usage: Option<Usage>,
}

fn other() -> String {
    "other".into()
}

/// What was wrong with a driver's answer.
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    #[error("the driver answered without data (expected the response JSON)")]
    NoData,
    #[error("the driver's answer is not a valid response JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the driver's tool call #{0} has no name")]
    Unnamed(usize),
}

impl Response {
    /// Parses a driver's answer; the error says what was wrong with it.
    pub fn parse(data: Option<&str>) -> Result<Self, ResponseError> {
        let data = data.ok_or(ResponseError::NoData)?;
        let mut response: Self = serde_json::from_str(data).map_err(ResponseError::NotJson)?;
        for (i, call) in response.tool_calls.iter_mut().enumerate() {
            if call.name.is_empty() {
                return Err(ResponseError::Unnamed(i));
            }
            if call.id.is_empty() {
                call.id = format!("call_{i}");
            }
        }
        if response.text.as_deref() == Some("") {
            response.text = None;
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_defaults_and_fill_missing_ids() {
        let r = Response::parse(Some(
            r#"{"text":"","tool_calls":[{"id":"","name":"echo","arguments":"{}"}]}"#,
        ))
        .expect("valid");
        assert_eq!(r.text, None);
        assert_eq!(r.stop_reason, "other");
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.usage, None);
        assert!(Response::parse(None).is_err());
        assert!(
            Response::parse(Some("[1]"))
                .expect_err("not an object")
                .to_string()
                .contains("not a valid response JSON")
        );
        assert!(
            Response::parse(Some(r#"{"tool_calls":[{"id":"a","name":""}]}"#))
                .expect_err("no name")
                .to_string()
                .contains("no name")
        );
    }

    #[test]
    fn requests_serialise_as_documented() {
        let messages = [Message::user("hi")];
        let limits = InferenceLimits {
            max_output_tokens: None,
            context_tokens: Some(1000),
        };
        let json = serde_json::to_value(Request {
            protocol: PROTOCOL,
            purpose: Purpose::Turn,
            model: "m",
            system: None,
            messages: &messages,
            tools: &[],
            limits: &limits,
            continuation_id: None,
            stream: true,
        })
        .expect("serialise");
        assert_eq!(json["protocol"], 1);
        assert_eq!(json["purpose"], "turn");
        assert!(json.get("system").is_none());
        assert_eq!(json["messages"][0]["role"], "user");
        assert!(json["messages"][0].get("tool_calls").is_none());
        assert_eq!(json["limits"]["context_tokens"], 1000);
        assert!(json["continuation_id"].is_null());
    }
}
