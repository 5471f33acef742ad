//! Tables as roostctl prints them: columns padded to their widest cell,
//! colour only on a terminal (and never with `NO_COLOR` set), and ages the
//! way people read them (`45s`, `12m`, `3h`, `5d`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime};

use crate::api::SessionState;

/// Whether to colour what goes to stdout: a terminal, `NO_COLOR` unset or
/// empty (no-color.org), and not `TERM=dumb`.
pub(super) fn colour_wanted() -> bool {
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// The ANSI colour of a session state: green running, cyan hibernated, red
/// failed, yellow interrupted or starting, dim for the other ended ones.
pub(super) fn state_colour(state: SessionState) -> &'static str {
    match state {
        SessionState::Running => "32",
        SessionState::Hibernated => "36",
        SessionState::Failed => "31",
        SessionState::Interrupted | SessionState::Starting => "33",
        SessionState::Completed | SessionState::Stopped => "2",
    }
}

/// How long ago an RFC 3339 time was, in its largest whole unit; `-` when
/// it cannot be read.
pub(super) fn age(rfc3339: &str, now: SystemTime) -> String {
    humantime::parse_rfc3339_weak(rfc3339.trim_end_matches('Z'))
        .ok()
        .and_then(|then| now.duration_since(then).ok())
        .map_or_else(|| "-".to_string(), short)
}

/// `45s`, `12m`, `3h`, `5d`.
pub(super) fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// A table whose cells may carry a colour.
pub(super) struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<(String, Option<&'static str>)>>,
}

impl Table {
    pub(super) fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// A row; `colours` names (column, colour) pairs.
    pub(super) fn row(&mut self, cells: &[String], colours: &[(usize, Option<&'static str>)]) {
        let row = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let colour = colours.iter().find(|(c, _)| *c == i).and_then(|(_, c)| *c);
                (cell.clone(), colour)
            })
            .collect();
        self.rows.push(row);
    }

    pub(super) fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, (cell, _)) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let header: Vec<(String, Option<&str>)> =
            self.headers.iter().map(|h| (h.clone(), None)).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, colour)) in row.iter().enumerate() {
                let last = i + 1 == row.len();
                let pad = if last {
                    0
                } else {
                    widths[i].saturating_sub(cell.chars().count()) + 2
                };
                match colour {
                    Some(c) => line.push_str(&format!("\x1b[{c}m{cell}\x1b[0m")),
                    None => line.push_str(cell),
                }
                line.extend(std::iter::repeat_n(' ', pad));
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_their_largest_unit_and_columns_line_up_without_colour() {
        let now = humantime::parse_rfc3339("2026-12-02T12:00:00Z").expect("time");
        assert_eq!(age("2026-12-02T11:59:15.500Z", now), "44s");
        assert_eq!(age("2026-12-02T11:48:00Z", now), "12m");
        assert_eq!(age("2026-12-02T09:00:00Z", now), "3h");
        assert_eq!(age("2026-11-27T12:00:00Z", now), "5d");
        assert_eq!(age("not a time", now), "-");
        let mut table = Table::new(&["ID", "STATE", "AGE"]);
        table.row(&["a".into(), "running".into(), "3h".into()], &[(1, None)]);
        table.row(
            &["bbbb".into(), "failed".into(), "5d".into()],
            &[(1, Some("31"))],
        );
        let mut out = Vec::new();
        table.write(&mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "ID    STATE    AGE\na     running  3h\nbbbb  \x1b[31mfailed\x1b[0m   5d\n"
        );
    }
}
