//! A response body: how it is framed (length, chunked, to the close, none)
//! and read off the connection as the caller polls it, bounded per line.

use super::*;

/// How the response body is delimited.
#[derive(Debug, PartialEq)]
pub(super) enum Framing {
    /// No body (HEAD, 204, 304), or the body has been read.
    Done,
    /// `Content-Length`: bytes left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Neither: the body runs until the server closes the connection.
    UntilClose,
}

#[derive(Debug, PartialEq)]
pub(super) enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

pub(super) fn framing(
    head_only: bool,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Framing, HttpError> {
    if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Done);
    }
    if let Some(te) = headers.get(TRANSFER_ENCODING) {
        let last = te
            .to_str()
            .ok()
            .and_then(|v| v.rsplit(',').next())
            .map(|c| c.trim().to_ascii_lowercase());
        return Ok(if last.as_deref() == Some("chunked") {
            Framing::Chunked(Chunk::Size)
        } else {
            Framing::UntilClose
        });
    }
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    let Some(first) = lengths.next() else {
        return Ok(Framing::UntilClose);
    };
    let parse = |v: &HeaderValue| {
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| HttpError::Protocol("bad Content-Length".into()))
    };
    let len = parse(first)?;
    for other in lengths {
        if parse(other)? != len {
            return Err(HttpError::Protocol("conflicting Content-Length".into()));
        }
    }
    Ok(if len == 0 {
        Framing::Done
    } else {
        Framing::Length(len)
    })
}

/// A response body read from its connection as the reader asks for it;
/// read to the end, the connection goes back to the pool for the next
/// request to the server (`reuse`).
pub struct ResponseBody {
    /// `None` once given back.
    pub(super) conn: Option<Conn>,
    pub(super) framing: Framing,
    pub(super) timeout: Duration,
    pub(super) sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    pub(super) reuse: Option<super::pool::Server>,
    /// An error ended it: the connection is not reused.
    pub(super) failed: bool,
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if let (Some(server), Some(conn), Framing::Done, false) = (
            self.reuse.take(),
            self.conn.take(),
            &self.framing,
            self.failed,
        ) {
            super::pool::give(server, conn);
        }
    }
}

/// The next piece of body already in the buffer, `Some(None)` at the end,
/// `None` if more bytes must be read first.
pub(super) fn decode(
    framing: &mut Framing,
    buf: &mut BytesMut,
) -> Result<Option<Option<Bytes>>, HttpError> {
    loop {
        match framing {
            Framing::Done => return Ok(Some(None)),
            Framing::UntilClose => {
                return Ok((!buf.is_empty()).then(|| Some(buf.split().freeze())));
            }
            Framing::Length(left) => {
                if buf.is_empty() {
                    return Ok(None);
                }
                let n = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                if *left == 0 {
                    *framing = Framing::Done;
                }
                return Ok(Some(Some(buf.split_to(n).freeze())));
            }
            Framing::Chunked(Chunk::Data(left)) => {
                if buf.is_empty() {
                    return Ok(None);
                }
                let n = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                if *left == 0 {
                    *framing = Framing::Chunked(Chunk::DataEnd);
                }
                return Ok(Some(Some(buf.split_to(n).freeze())));
            }
            Framing::Chunked(Chunk::DataEnd) => {
                let Some(line) = take_line(buf)? else {
                    return Ok(None);
                };
                if !line.is_empty() {
                    return Err(HttpError::Protocol(
                        "chunk data longer than its size".into(),
                    ));
                }
                *framing = Framing::Chunked(Chunk::Size);
            }
            Framing::Chunked(Chunk::Size) => {
                let Some(line) = take_line(buf)? else {
                    return Ok(None);
                };
                let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(digits)
                    .ok()
                    .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                    .ok_or_else(|| HttpError::Protocol("bad chunk size".into()))?;
                *framing = Framing::Chunked(if size == 0 {
                    Chunk::Trailers
                } else {
                    Chunk::Data(size)
                });
            }
            Framing::Chunked(Chunk::Trailers) => {
                let Some(line) = take_line(buf)? else {
                    return Ok(None);
                };
                if line.is_empty() {
                    *framing = Framing::Done;
                }
            }
        }
    }
}

/// One CRLF- (or LF-) terminated line from the front of `buf`, without its end.
pub(super) fn take_line(buf: &mut BytesMut) -> Result<Option<Bytes>, HttpError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE {
            return Err(HttpError::Protocol("chunk line too long".into()));
        }
        return Ok(None);
    };
    // However the bytes came in: a long line is refused whole too.
    if end > MAX_LINE {
        return Err(HttpError::Protocol("chunk line too long".into()));
    }
    let mut line = buf.split_to(end + 1).freeze();
    line.truncate(end);
    if line.last() == Some(&b'\r') {
        line.truncate(end - 1);
    }
    Ok(Some(line))
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("framing", &self.framing)
            .field("buffered", &self.conn.as_ref().map_or(0, |c| c.buf.len()))
            .finish()
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match decode(&mut this.framing, &mut conn.buf) {
                Err(e) => {
                    this.framing = Framing::Done;
                    this.failed = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Some(Some(data))) => {
                    if let Some(sleep) = &mut this.sleep {
                        sleep
                            .as_mut()
                            .reset(tokio::time::Instant::now() + this.timeout);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Some(None)) => return Poll::Ready(None),
                Ok(None) => {}
            }
            match conn.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    let complete = this.framing == Framing::UntilClose;
                    this.framing = Framing::Done;
                    this.failed = true;
                    return if complete {
                        Poll::Ready(None)
                    } else {
                        Poll::Ready(Some(Err(HttpError::Incomplete)))
                    };
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    this.framing = Framing::Done;
                    this.failed = true;
                    return Poll::Ready(Some(Err(HttpError::Read(e))));
                }
                Poll::Pending => {
                    let timeout = this.timeout;
                    let sleep = this
                        .sleep
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                    ready!(sleep.as_mut().poll(cx));
                    this.framing = Framing::Done;
                    this.failed = true;
                    return Poll::Ready(Some(Err(HttpError::ReadTimeout(timeout))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Done => SizeHint::with_exact(0),
            Framing::Length(left) => SizeHint::with_exact(left),
            _ => SizeHint::default(),
        }
    }
}
