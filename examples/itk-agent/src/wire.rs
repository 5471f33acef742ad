//! The ITK's `itk.Instruction` read from protobuf's wire format, by the
//! field numbers of its `protos/instruction.proto`: `Instruction` (1
//! `call_agent`, 2 `return_response`, 3 `steps`), `CallAgent` (1 transport,
//! 2 agent_card_uri, 3 instruction, 4 streaming, 5 send_message, 6
//! push_notification {1 url}, 7 resubscribe), `ReturnResponse` (1 response,
//! 2 hold_task), `SeriesOfSteps` (1 instructions). A nested instruction is
//! kept as the bytes it came in, to be sent on as they are.

/// Deepest nesting read (a hostile instruction cannot exhaust the stack).
const MAX_DEPTH: u32 = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Instruction {
    Call(Call),
    Return { response: String, hold: bool },
    Steps(Vec<Instruction>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub transport: String,
    pub agent_card_uri: String,
    /// The nested instruction, encoded.
    pub instruction: Vec<u8>,
    pub streaming: bool,
    pub behavior: Behavior,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Behavior {
    Send,
    Push(String),
    Resubscribe,
}

impl Instruction {
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        parse(bytes, 0)
    }

    /// Whether any `return_response` in it asks to hold the task.
    pub fn holds(&self) -> bool {
        match self {
            Self::Return { hold, .. } => *hold,
            Self::Steps(steps) => steps.iter().any(Self::holds),
            Self::Call(_) => false,
        }
    }
}

fn parse(bytes: &[u8], depth: u32) -> Result<Instruction, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH}"));
    }
    let mut found = None;
    for field in Fields(bytes) {
        let (number, value) = field?;
        let Value::Bytes(b) = value else { continue };
        found = Some(match number {
            1 => Instruction::Call(call(b)?),
            2 => {
                let (mut response, mut hold) = (String::new(), false);
                for f in Fields(b) {
                    match f? {
                        (1, Value::Bytes(s)) => response = string(s)?,
                        (2, Value::Varint(v)) => hold = v != 0,
                        _ => {}
                    }
                }
                Instruction::Return { response, hold }
            }
            3 => {
                let mut steps = Vec::new();
                for f in Fields(b) {
                    if let (1, Value::Bytes(s)) = f? {
                        steps.push(parse(s, depth + 1)?);
                    }
                }
                Instruction::Steps(steps)
            }
            _ => continue,
        });
    }
    found.ok_or_else(|| "an instruction with no step".to_string())
}

fn call(bytes: &[u8]) -> Result<Call, String> {
    let mut c = Call {
        transport: String::new(),
        agent_card_uri: String::new(),
        instruction: Vec::new(),
        streaming: false,
        behavior: Behavior::Send,
    };
    for f in Fields(bytes) {
        match f? {
            (1, Value::Bytes(s)) => c.transport = string(s)?,
            (2, Value::Bytes(s)) => c.agent_card_uri = string(s)?,
            (3, Value::Bytes(s)) => c.instruction = s.to_vec(),
            (4, Value::Varint(v)) => c.streaming = v != 0,
            (5, Value::Bytes(_)) => c.behavior = Behavior::Send,
            (6, Value::Bytes(s)) => {
                let mut url = String::new();
                for f in Fields(s) {
                    if let (1, Value::Bytes(u)) = f? {
                        url = string(u)?;
                    }
                }
                c.behavior = Behavior::Push(url);
            }
            (7, Value::Bytes(_)) => c.behavior = Behavior::Resubscribe,
            _ => {}
        }
    }
    if c.agent_card_uri.is_empty() {
        return Err("call_agent names no agent_card_uri".into());
    }
    Ok(c)
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one message, in order.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let r = (|| {
            let key = varint(&mut self.0)?;
            let value = match key & 7 {
                0 => Value::Varint(varint(&mut self.0)?),
                2 => {
                    let len = usize::try_from(varint(&mut self.0)?).map_err(|_| "too long")?;
                    if len > self.0.len() {
                        return Err("a field runs past the message".to_string());
                    }
                    let (b, rest) = self.0.split_at(len);
                    self.0 = rest;
                    Value::Bytes(b)
                }
                1 | 5 => {
                    let n = if key & 7 == 1 { 8 } else { 4 };
                    if n > self.0.len() {
                        return Err("a field runs past the message".to_string());
                    }
                    self.0 = &self.0[n..];
                    Value::Fixed
                }
                t => return Err(format!("wire type {t} is not read here")),
            };
            Ok((key >> 3, value))
        })();
        if r.is_err() {
            // Nothing after a broken field is read.
            self.0 = &[];
        }
        Some(r)
    }
}

fn varint(b: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&byte, rest)) = b.split_first() else {
            return Err("a varint runs past the message".into());
        };
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a varint longer than 10 bytes".into())
}

/// Standard base64 (with or without padding); `None` if `s` is not.
pub fn base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    if s.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}
