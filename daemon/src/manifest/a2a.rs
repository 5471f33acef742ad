//! The `a2a:` section of `murmur.yaml`: what a capsule's agent card says
//! about it (description, skills, provider, links, media types, and the
//! skills only authenticated clients see), validated.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What the agent card says, as the capsule author wrote it (validated;
/// `description` already defaulted to the manifest's). Kept with a
/// session (`a2a-card.json` in its bookkeeping directory) so the card of
/// an ended session still says what the session was.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// Media types the agent takes (default `text/plain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    /// Media types the agent answers with (default `text/plain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<Skill>,
    /// Skills listed only in the authenticated extended card
    /// (`GetExtendedAgentCard`); with any, the card says it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extended_skills: Vec<Skill>,
    /// What the card says to a client that names no protocol version
    /// (`exact` or `merged`); unset: roostd's `a2a.card_compat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_compat: Option<CardCompat>,
}

/// What the agent card says to a client that sends no `A2A-Version`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CardCompat {
    /// A2A 1.0's card exactly (its schema admits no other member).
    #[default]
    Exact,
    /// 1.0's card with 0.3's top-level members beside it (`url`,
    /// `protocolVersion`, `preferredTransport`, `additionalInterfaces`,
    /// `security`, 0.3 security schemes), so a 0.3 client (which sends no
    /// `A2A-Version`) accepts it as well as a 1.0 one.
    Merged,
}

/// Who offers the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub organization: String,
    pub url: String,
}

/// One thing the agent can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
}

/// Longest text a card field may hold (a card is fetched by every client).
const MAX_TEXT: usize = 4096;
/// Most skills a card may list (both lists together).
const MAX_SKILLS: usize = 100;

impl CardSpec {
    /// Checks the section; `Err((field, what to change))`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let field = |f: &str| format!("a2a.{f}");
        if let Some(d) = &self.description {
            text(d).map_err(|e| (field("description"), e.to_string()))?;
        }
        if let Some(p) = &self.provider {
            text(&p.organization).map_err(|e| (field("provider.organization"), e.to_string()))?;
            url(&p.url).map_err(|e| (field("provider.url"), e.to_string()))?;
        }
        for (name, u) in [
            ("documentation_url", &self.documentation_url),
            ("icon_url", &self.icon_url),
        ] {
            if let Some(u) = u {
                url(u).map_err(|e| (field(name), e.to_string()))?;
            }
        }
        modes(&self.input_modes).map_err(|e| (field("input_modes"), e.to_string()))?;
        modes(&self.output_modes).map_err(|e| (field("output_modes"), e.to_string()))?;
        if self.skills.len() + self.extended_skills.len() > MAX_SKILLS {
            return Err((
                field("skills"),
                format!("lists more than {MAX_SKILLS} skills (with extended_skills)"),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (list, skills) in [
            ("skills", &self.skills),
            ("extended_skills", &self.extended_skills),
        ] {
            for (i, s) in skills.iter().enumerate() {
                let at = |f: &str| field(&format!("{list}[{i}].{f}"));
                text(&s.id).map_err(|e| (at("id"), e.to_string()))?;
                if s.id.chars().any(char::is_whitespace) {
                    return Err((at("id"), "must not contain spaces".into()));
                }
                if !seen.insert(s.id.as_str()) {
                    return Err((
                        at("id"),
                        format!("'{}' is used by another skill; ids must be unique", s.id),
                    ));
                }
                text(&s.name).map_err(|e| (at("name"), e.to_string()))?;
                text(&s.description).map_err(|e| (at("description"), e.to_string()))?;
                for t in s.tags.iter().chain(&s.examples) {
                    text(t).map_err(|e| (at("tags/examples"), e.to_string()))?;
                }
                modes(&s.input_modes).map_err(|e| (at("input_modes"), e.to_string()))?;
                modes(&s.output_modes).map_err(|e| (at("output_modes"), e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Whether the author wrote anything the card would say.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Keeps the section with a session (`dir`: its bookkeeping directory,
    /// below `root`, its workdir; nothing below `root` is followed through a
    /// link). Not synced: it is a copy of the manifest's, and without it the
    /// card says what the session record does.
    pub fn save(&self, root: &Path, dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let path = dir.join(CARD_FILE);
        crate::fsx::remove_file(root, &path)?;
        if self.is_empty() {
            return Ok(());
        }
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::fsx::create_new(root, &path, 0o644)?.write_all(&text)
    }

    /// The section kept with a session; empty when it has none (or one that
    /// does not read or validate, which is logged).
    pub fn load(dir: &Path) -> Self {
        let path = dir.join(CARD_FILE);
        let bytes = match crate::fsx::read(dir, &path) {
            Ok(bytes) => bytes,
            Err(_) => return Self::default(),
        };
        let spec = serde_json::from_slice::<Self>(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|spec| {
                spec.validate()
                    .map(|()| spec)
                    .map_err(|(f, m)| format!("{f} {m}"))
            });
        spec.unwrap_or_else(|error| {
            tracing::warn!(path = %path.display(), %error, "agent card section ignored");
            Self::default()
        })
    }
}

/// Where a session keeps its card section, in its bookkeeping directory.
pub const CARD_FILE: &str = "a2a-card.json";

/// Why a value of the card section (or a URL of roostd's config) is
/// refused; worded to follow the field's name.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("must not be empty")]
    Empty,
    #[error("is {0} bytes; at most {MAX_TEXT}")]
    TooLong(usize),
    #[error("'{0}' must be an absolute http:// or https:// URL")]
    NotHttp(String),
    #[error("'{0}' must be an absolute URL with a host and no spaces")]
    NoHost(String),
    #[error("'{0}' is not a media type (type/subtype, e.g. text/plain)")]
    NotMediaType(String),
}

fn text(s: &str) -> Result<(), ValueError> {
    if s.trim().is_empty() {
        return Err(ValueError::Empty);
    }
    if s.len() > MAX_TEXT {
        return Err(ValueError::TooLong(s.len()));
    }
    Ok(())
}

/// An absolute `http://` or `https://` URL with a host.
pub fn url(u: &str) -> Result<(), ValueError> {
    text(u)?;
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| ValueError::NotHttp(u.to_string()))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ValueError::NoHost(u.to_string()));
    }
    Ok(())
}

/// Media types (`type/subtype`).
fn modes(modes: &[String]) -> Result<(), ValueError> {
    for m in modes {
        let ok = m.split_once('/').is_some_and(|(t, s)| {
            !t.is_empty()
                && !s.is_empty()
                && !m.chars().any(|c| c.is_whitespace() || c.is_control())
        });
        if !ok {
            return Err(ValueError::NotMediaType(m.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(id: &str) -> Skill {
        Skill {
            id: id.into(),
            name: "N".into(),
            description: "D".into(),
            tags: vec!["t".into()],
            examples: vec![],
            input_modes: vec![],
            output_modes: vec![],
        }
    }

    #[test]
    fn a_card_section_says_what_is_wrong_and_where() {
        let ok = CardSpec {
            skills: vec![skill("a")],
            extended_skills: vec![skill("b")],
            output_modes: vec!["application/json".into()],
            ..Default::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        let twice = CardSpec {
            skills: vec![skill("a")],
            extended_skills: vec![skill("a")],
            ..Default::default()
        };
        let (field, why) = twice.validate().expect_err("refused");
        assert_eq!(field, "a2a.extended_skills[0].id");
        assert!(why.contains("unique"), "{why}");
        let bad_url = CardSpec {
            icon_url: Some("ftp://x/icon.png".into()),
            ..Default::default()
        };
        assert_eq!(bad_url.validate().expect_err("refused").0, "a2a.icon_url");
        let bad_mode = CardSpec {
            input_modes: vec!["text".into()],
            ..Default::default()
        };
        assert_eq!(
            bad_mode.validate().expect_err("refused").0,
            "a2a.input_modes"
        );
    }
}
