//! Server-sent events, as Chat Completions streams them: one `data:` line per
//! event, `data: [DONE]` at the end.

/// One event line that matters.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The payload of a `data:` line (a JSON chunk).
    Data(&'a str),
    /// `data: [DONE]`.
    Done,
}

/// The event a line carries, if any: comments, other fields and blank lines carry none.
pub fn event(line: &str) -> Option<Event<'_>> {
    let data = line.strip_prefix("data:")?;
    let data = data.strip_prefix(' ').unwrap_or(data).trim_end();
    match data {
        "" => None,
        "[DONE]" => Some(Event::Done),
        json => Some(Event::Data(json)),
    }
}

/// Cuts a byte stream into lines, whatever the read boundaries were.
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// Adds bytes; returns the lines they complete, without `\n` or `\r\n`.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let Some(last_newline) = self.pending.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.pending.split_off(last_newline + 1);
        let complete = std::mem::replace(&mut self.pending, rest);
        complete[..last_newline]
            .split(|&b| b == b'\n')
            .map(line_text)
            .collect()
    }

    /// The unterminated last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        (!rest.is_empty()).then(|| line_text(&rest))
    }
}

fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_from_lines() {
        assert_eq!(event("data: {\"a\":1}"), Some(Event::Data("{\"a\":1}")));
        assert_eq!(event("data:{}"), Some(Event::Data("{}")));
        assert_eq!(event("data: [DONE]"), Some(Event::Done));
        assert_eq!(event(": keep-alive"), None);
        assert_eq!(event("event: message"), None);
        assert_eq!(event(""), None);
    }

    #[test]
    fn lines_survive_any_split() {
        let stream = "data: {\"x\":\"é\"}\r\n\r\n: ping\ndata: [DONE]\n";
        let bytes = stream.as_bytes();
        for cut in 0..bytes.len() {
            let mut lines = Lines::default();
            let mut got = lines.push(&bytes[..cut]);
            got.extend(lines.push(&bytes[cut..]));
            got.extend(lines.finish());
            assert_eq!(
                got,
                ["data: {\"x\":\"é\"}", "", ": ping", "data: [DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn unterminated_last_line() {
        let mut lines = Lines::default();
        assert!(lines.push(b"data: {}").is_empty());
        assert_eq!(lines.finish().as_deref(), Some("data: {}"));
        assert_eq!(lines.finish(), None);
    }
}
