//! Identifiers that cross modules, each its own type so that one cannot be
//! passed for another: a session's id (`ses_<uuid v7>`) and an A2A task's
//! (`tsk_<uuid v7>`). Cheap to clone; read as `&str` where SQL, HTTP or the
//! WIT want text.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// A fresh id (time-ordered).
            pub fn generate() -> Self {
                Self(format!(concat!($prefix, "_{}"), uuid::Uuid::now_v7().simple()).into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id.into())
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.into())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0.to_string()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}

id_type!(
    /// A session's id, `ses_<uuid v7>`.
    SessionId,
    "ses"
);

id_type!(
    /// An A2A task's id, `tsk_<uuid v7>`.
    TaskId,
    "tsk"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_read_as_text() {
        let id = SessionId::generate();
        assert!(id.starts_with("ses_") && id.len() == 36, "{id}");
        let task = TaskId::generate();
        assert!(task.as_str().starts_with("tsk_"), "{task}");
        let copy = SessionId::from(id.to_string());
        assert_eq!(copy, id);
        assert_eq!(format!("{copy:?}"), format!("{:?}", id.as_str()));
        let mut set = std::collections::HashSet::new();
        set.insert(id.clone());
        assert!(set.contains(id.as_str()), "looked up by its text");
    }
}
