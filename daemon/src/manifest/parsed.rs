//! Parsed `murmur.yaml` texts, kept by their exact text: a start of a
//! capsule whose manifest has not changed skips the YAML parse. Only the
//! parse is kept; every check after it, and every read of the file system,
//! runs on each load.
//!
//! The key is the whole text, not the file's identity or time stamp, so a
//! hit is what parsing that text again would give and nothing can be stale.
//! It holds at most [`ENTRIES`] texts, [`BUDGET`] bytes of text in all,
//! none over [`MAX_TEXT`] (a longer one is parsed every time), whatever the
//! manifests a client names. A text with a YAML anchor or alias (`&`, `*`)
//! is parsed every time too: an alias repeats what it names, so a short
//! text could parse into a value of any size. Without them a value is a
//! small multiple of its text (tens of times at most, for a text of empty
//! lists under `inference.driver.config`, which keeps any YAML): a few MiB
//! at the very most in all.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most texts kept; one more pushes another out.
pub(super) const ENTRIES: usize = 64;
/// Longest text kept (ordinary manifests are a few hundred bytes; the
/// examples' are 0.2–1.4 KiB).
pub(super) const MAX_TEXT: usize = 4 * 1024;
/// Most bytes of text kept in all.
pub(super) const BUDGET: usize = 64 * 1024;

/// Values parsed from texts, by text.
pub(super) struct Parsed<T> {
    kept: Mutex<Option<HashMap<Box<str>, T>>>,
}

impl<T: Clone> Parsed<T> {
    pub(super) const fn new() -> Self {
        Self {
            kept: Mutex::new(None),
        }
    }

    /// What `parse` gives `text`: kept from an earlier call with the same
    /// text, else parsed now (and kept if it parsed).
    pub(super) fn get<E>(
        &self,
        text: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, E> {
        if text.len() > MAX_TEXT || text.contains(['&', '*']) {
            return parse(text);
        }
        if let Some(hit) = self.lock().get_or_insert_default().get(text) {
            return Ok(hit.clone());
        }
        let value = parse(text)?;
        let mut kept = self.lock();
        let map = kept.get_or_insert_default();
        // Room for it: others go (whichever come first) until it fits.
        while map.len() >= ENTRIES
            || map.keys().map(|t| t.len()).sum::<usize>() + text.len() > BUDGET
        {
            let Some(other) = map.keys().next().cloned() else {
                break;
            };
            map.remove(&other);
        }
        map.insert(text.into(), value.clone());
        Ok(value)
    }

    /// How many texts are kept, and their bytes.
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        self.lock()
            .as_ref()
            .map_or((0, 0), |m| (m.len(), m.keys().map(|t| t.len()).sum()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<Box<str>, T>>> {
        // A panic while holding it leaves a map of whole entries.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn counted<'a>(parses: &'a Cell<u32>) -> impl Fn(&str) -> Result<String, String> + 'a {
        move |text: &str| {
            parses.set(parses.get() + 1);
            if text.starts_with('!') {
                Err(format!("bad: {text}"))
            } else {
                Ok(text.to_uppercase())
            }
        }
    }

    #[test]
    fn the_same_text_is_parsed_once_and_a_changed_one_again() {
        let kept = Parsed::new();
        let parses = Cell::new(0);
        let parse = counted(&parses);
        assert_eq!(kept.get("name: a", &parse), Ok("NAME: A".to_string()));
        assert_eq!(kept.get("name: a", &parse), Ok("NAME: A".to_string()));
        assert_eq!(parses.get(), 1, "the second load of the same text is kept");
        // One byte changed is another text: parsed, never the old value.
        assert_eq!(kept.get("name: b", &parse), Ok("NAME: B".to_string()));
        assert_eq!(parses.get(), 2);
    }

    #[test]
    fn errors_long_texts_and_aliases_are_not_kept_and_the_count_is_bounded() {
        let kept = Parsed::new();
        let parses = Cell::new(0);
        let parse = counted(&parses);
        assert!(kept.get("!x", &parse).is_err());
        assert!(kept.get("!x", &parse).is_err());
        assert_eq!(parses.get(), 2, "a text that failed is parsed again");
        let long = "a".repeat(MAX_TEXT + 1);
        kept.get(&long, &parse).expect("parsed");
        kept.get(&long, &parse).expect("parsed");
        assert_eq!(parses.get(), 4, "a text over MAX_TEXT is parsed each time");
        // An alias can make a large value of a short text.
        let aliased = "tools: &a [x, x]\nshell: *a";
        kept.get(aliased, &parse).expect("parsed");
        kept.get(aliased, &parse).expect("parsed");
        assert_eq!(parses.get(), 6, "a text with an alias is parsed each time");
        assert_eq!(kept.len(), (0, 0));
        for i in 0..ENTRIES * 3 {
            kept.get(&format!("name: {i}"), &parse).expect("parsed");
            assert!(kept.len().0 <= ENTRIES);
        }
        assert_eq!(kept.len().0, ENTRIES);
        // Texts near the longest kept: the bytes are bounded too.
        for i in 0..ENTRIES {
            let text = format!("{i:>width$}", width = MAX_TEXT - 1);
            kept.get(&text, &parse).expect("parsed");
            let (count, bytes) = kept.len();
            assert!(bytes <= BUDGET, "{count} texts, {bytes} bytes");
        }
        // The last one made room for itself.
        let before = parses.get();
        let last = format!("{:>width$}", ENTRIES - 1, width = MAX_TEXT - 1);
        kept.get(&last, &parse).expect("parsed");
        assert_eq!(parses.get(), before, "the last text is kept");
    }
}
