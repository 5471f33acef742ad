//! The driver request (`tool-input.data`, protocol 1) and the Chat Completions
//! body made from it.

use serde::Deserialize;
use serde_json::error::Category;
use serde_json::{Map, Value, json};

use crate::config::DriverConfig;

/// The protocol version this driver speaks.
pub const PROTOCOL: u64 = 1;

#[derive(Debug, Deserialize)]
pub struct DriverRequest {
    #[serde(default)]
    pub protocol: Option<u64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub continuation_id: Option<String>,
    #[serde(default = "default_stream")]
    pub stream: bool,
}

fn default_stream() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Files the user's message carried; `content` names each as well.
    #[serde(default)]
    pub attachments: Vec<Attachment>,
}

/// A file of a user's message: base64 `data` or a `url`.
#[derive(Debug, Deserialize)]
pub struct Attachment {
    pub media_type: String,
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
}

impl Attachment {
    /// A `data:` URL of its bytes, else its URL.
    fn href(&self) -> Option<String> {
        match (&self.data, &self.url) {
            (Some(data), _) => Some(format!("data:{};base64,{data}", self.media_type)),
            (None, url) => url.clone(),
        }
    }

    fn image(&self) -> bool {
        matches!(
            self.media_type.to_ascii_lowercase().as_str(),
            "image/png" | "image/jpeg" | "image/gif" | "image/webp"
        )
    }

    fn pdf(&self) -> bool {
        self.media_type.eq_ignore_ascii_case("application/pdf")
    }

    /// Chat Completions' content part for it: an image (bytes or URL), or
    /// a PDF's bytes; `None` for what the API does not take (the message's
    /// text names it).
    fn chat_part(&self) -> Option<Value> {
        if self.image() {
            return Some(json!({"type": "image_url", "image_url": {"url": self.href()?}}));
        }
        if self.pdf() && self.data.is_some() {
            return Some(json!({"type": "file", "file": {
                "filename": self.filename.as_deref().unwrap_or("document.pdf"),
                "file_data": self.href()?,
            }}));
        }
        None
    }

    /// The Responses API's input part for it, as [`Attachment::chat_part`].
    fn response_part(&self) -> Option<Value> {
        if self.image() {
            return Some(json!({"type": "input_image", "image_url": self.href()?}));
        }
        if self.pdf() {
            return Some(match (&self.data, &self.url) {
                (Some(_), _) => json!({"type": "input_file",
                    "filename": self.filename.as_deref().unwrap_or("document.pdf"),
                    "file_data": self.href()?}),
                (None, url) => json!({"type": "input_file", "file_url": url.as_deref()?}),
            });
        }
        None
    }
}

#[derive(Debug, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// A JSON string.
    #[serde(default)]
    pub arguments: String,
}

#[derive(Debug, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub input_schema: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Limits {
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

impl DriverRequest {
    /// Parses `tool-input.data`; errors say what is wrong with it.
    pub fn parse(data: Option<&str>) -> Result<Self, String> {
        let data = data.ok_or("driver request is missing: tool-input.data is empty")?;
        let request: Self = serde_json::from_str(data).map_err(|e| match e.classify() {
            Category::Syntax | Category::Eof => format!("driver request is not valid JSON: {e}"),
            _ => format!("driver request is malformed: {e}"),
        })?;
        match request.protocol {
            Some(version) if version != PROTOCOL => Err(format!(
                "driver request has protocol {version}; this driver speaks protocol {PROTOCOL}"
            )),
            _ => Ok(request),
        }
    }

    /// The request's model, else `inference.model`.
    pub fn model_or<'a>(&'a self, fallback: Option<&'a str>) -> Option<&'a str> {
        self.model
            .as_deref()
            .filter(|model| !model.trim().is_empty())
            .or(fallback)
    }

    /// The `POST /chat/completions` body.
    pub fn chat_body(&self, model: &str, config: &DriverConfig, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), model.into());
        body.insert("messages".into(), self.chat_messages().into());
        if !self.tools.is_empty() {
            let tools = self.tools.iter().map(chat_tool).collect::<Vec<_>>();
            body.insert("tools".into(), tools.into());
        }
        body.insert("stream".into(), stream.into());
        if stream {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(temperature) = config.temperature {
            body.insert("temperature".into(), temperature.into());
        }
        if let Some(max_tokens) = config.max_tokens.or(self.limits.max_output_tokens) {
            body.insert("max_tokens".into(), max_tokens.into());
        }
        if let Some(id) = self.continuation(config) {
            body.insert("previous_response_id".into(), id.into());
        }
        Value::Object(body)
    }

    /// The Responses API's body: the system prompt as `instructions`, the
    /// messages as input items, and the continuation as
    /// `previous_response_id` (the server keeps the conversation).
    pub fn responses_body(&self, model: &str, config: &DriverConfig) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), model.into());
        if let Some(system) = self.system.as_deref().filter(|s| !s.is_empty()) {
            body.insert("instructions".into(), system.into());
        }
        let input: Vec<Value> = self.messages.iter().flat_map(response_items).collect();
        body.insert("input".into(), input.into());
        if !self.tools.is_empty() {
            let tools = self.tools.iter().map(response_tool).collect::<Vec<_>>();
            body.insert("tools".into(), tools.into());
        }
        body.insert("stream".into(), false.into());
        if let Some(temperature) = config.temperature {
            body.insert("temperature".into(), temperature.into());
        }
        if let Some(max_tokens) = config.max_tokens.or(self.limits.max_output_tokens) {
            body.insert("max_output_tokens".into(), max_tokens.into());
        }
        if let Some(id) = self.continuation_id.as_deref().filter(|id| !id.is_empty()) {
            body.insert("previous_response_id".into(), id.into());
        }
        Value::Object(body)
    }

    /// The continuation id to send, when the config says the server keeps conversations.
    fn continuation(&self, config: &DriverConfig) -> Option<&str> {
        self.continuation_id
            .as_deref()
            .filter(|id| config.continuation && !id.is_empty())
    }

    /// The system prompt (if any), then the conversation in Chat Completions form.
    fn chat_messages(&self) -> Vec<Value> {
        let system = self
            .system
            .as_deref()
            .filter(|system| !system.is_empty())
            .map(|system| json!({"role": "system", "content": system}));
        system
            .into_iter()
            .chain(self.messages.iter().map(chat_message))
            .collect()
    }
}

fn chat_message(message: &Message) -> Value {
    let content = message.content.as_deref();
    match message.role.as_str() {
        "assistant" if !message.tool_calls.is_empty() => {
            let calls = message.tool_calls.iter().map(chat_tool_call);
            json!({
                "role": "assistant",
                "content": content,
                "tool_calls": calls.collect::<Vec<_>>(),
            })
        }
        "tool" => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "content": content.unwrap_or_default(),
        }),
        "user" if message.attachments.iter().any(|a| a.chat_part().is_some()) => {
            let text = json!({"type": "text", "text": content.unwrap_or_default()});
            let files = message.attachments.iter().filter_map(Attachment::chat_part);
            json!({"role": "user", "content": std::iter::once(text).chain(files).collect::<Vec<_>>()})
        }
        role => json!({"role": role, "content": content.unwrap_or_default()}),
    }
}

/// One message as Responses API input items: a tool call and a tool result
/// are items of their own.
fn response_items(message: &Message) -> Vec<Value> {
    let content = message.content.as_deref().unwrap_or_default();
    match message.role.as_str() {
        "tool" => vec![json!({
            "type": "function_call_output",
            "call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "output": content,
        })],
        "assistant" => {
            let text =
                (!content.is_empty()).then(|| json!({"role": "assistant", "content": content}));
            text.into_iter()
                .chain(message.tool_calls.iter().map(|call| {
                    json!({
                        "type": "function_call", "call_id": call.id, "name": call.name,
                        "arguments": non_empty_arguments(&call.arguments),
                    })
                }))
                .collect()
        }
        "user" if message.attachments.iter().any(|a| a.response_part().is_some()) => {
            let text = json!({"type": "input_text", "text": content});
            let files = message
                .attachments
                .iter()
                .filter_map(Attachment::response_part);
            vec![json!({"role": "user", "content": std::iter::once(text).chain(files).collect::<Vec<_>>()})]
        }
        role => vec![json!({"role": role, "content": content})],
    }
}

fn response_tool(tool: &ToolSpec) -> Value {
    let schema = tool
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    json!({"type": "function", "name": tool.name, "description": tool.description, "parameters": schema})
}

fn chat_tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": non_empty_arguments(&call.arguments)},
    })
}

fn chat_tool(tool: &ToolSpec) -> Value {
    let schema = tool
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    json!({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": schema},
    })
}

/// Tool arguments as a JSON string; a tool without arguments gets `{}`.
pub fn non_empty_arguments(arguments: &str) -> &str {
    if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = r#"{
      "protocol": 1, "purpose": "turn", "model": "llama3.1", "system": "Be brief.",
      "messages": [
        {"role": "user", "content": "the task text"},
        {"role": "assistant", "content": null,
         "tool_calls": [{"id": "call_1", "name": "echo-tool", "arguments": "{\"text\":\"hi\"}"}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "echo-tool", "content": "hi"}
      ],
      "tools": [{"name": "echo-tool", "description": "Echo the input", "input_schema": {"type": "object"}}],
      "limits": {"max_output_tokens": 256, "context_tokens": 128000},
      "continuation_id": "resp_7", "stream": true
    }"#;

    #[test]
    fn converts_to_chat_completions() {
        let request = DriverRequest::parse(Some(REQUEST)).expect("valid");
        let body = request.chat_body("llama3.1", &DriverConfig::default(), true);
        assert_eq!(
            body,
            json!({
                "model": "llama3.1",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "the task text"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "echo-tool", "arguments": "{\"text\":\"hi\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "hi"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "echo-tool", "description": "Echo the input",
                    "parameters": {"type": "object"}}}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 256
            })
        );
    }

    #[test]
    fn config_overrides_and_continuation() {
        let request = DriverRequest::parse(Some(REQUEST)).expect("valid");
        let config = DriverConfig {
            max_tokens: Some(64),
            temperature: Some(0.5),
            continuation: true,
            ..DriverConfig::default()
        };
        let body = request.chat_body("m", &config, false);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["previous_response_id"], "resp_7");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn images_and_pdfs_go_as_content_parts_and_other_files_stay_named_in_the_text() {
        let request = DriverRequest::parse(Some(
            r#"{"messages": [{"role": "user", "content": "look\n\n[file a.png (image/png), 8 base64 characters]",
              "attachments": [
                {"media_type": "image/png", "filename": "a.png", "data": "iVBORw0K"},
                {"media_type": "application/pdf", "filename": "r.pdf", "data": "JVBERi0x"},
                {"media_type": "text/csv", "data": "YSxi"},
                {"media_type": "image/jpeg", "url": "https://img.example/x.jpg"}]}]}"#,
        ))
        .expect("valid");
        let chat = request.chat_body("m", &DriverConfig::default(), false);
        assert_eq!(
            chat["messages"][0]["content"],
            json!([
                {"type": "text", "text": "look\n\n[file a.png (image/png), 8 base64 characters]"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                {"type": "file", "file": {"filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}},
                {"type": "image_url", "image_url": {"url": "https://img.example/x.jpg"}}
            ])
        );
        let responses = request.responses_body("m", &DriverConfig::default());
        assert_eq!(responses["input"][0]["content"][1]["type"], "input_image");
        assert_eq!(responses["input"][0]["content"][2]["type"], "input_file");
        assert_eq!(responses["input"][0]["content"].as_array().map(Vec::len), Some(4));
        // Only files no API here takes: the text alone, as before.
        let plain = DriverRequest::parse(Some(
            r#"{"messages": [{"role": "user", "content": "t", "attachments": [{"media_type": "text/csv", "data": "YSxi"}]}]}"#,
        ))
        .expect("valid");
        let chat = plain.chat_body("m", &DriverConfig::default(), false);
        assert_eq!(chat["messages"][0]["content"], "t");
    }

    #[test]
    fn bad_requests_are_explained() {
        let err = DriverRequest::parse(Some("{oops")).expect_err("syntax");
        assert!(
            err.starts_with("driver request is not valid JSON: "),
            "{err}"
        );
        let err = DriverRequest::parse(Some(r#"{"messages": 3}"#)).expect_err("shape");
        assert!(err.starts_with("driver request is malformed: "), "{err}");
        let err = DriverRequest::parse(Some(r#"{"protocol": 2}"#)).expect_err("version");
        assert!(err.contains("protocol 2"), "{err}");
        assert!(DriverRequest::parse(None).is_err());
    }
}
