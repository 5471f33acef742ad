//! What roostd and roostctl share, defined once: the control API's wire
//! types ([`api`]), the artifact format — bundle, `murmur.lock`, registry
//! layout — that `roostctl publish` writes and staging reads ([`artifact`]),
//! and the default paths ([`paths`]).
//!
//! A small crate of its own so that roostd depends on these and not on the
//! CLI: nothing here does I/O beyond reading and writing the files the
//! format names.

pub mod api;
pub mod artifact;
pub mod paths;
