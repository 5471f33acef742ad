//! roostctl as a library: the control API's wire types ([`api`]), a typed client
//! ([`client`]), the shared default paths ([`paths`]) and the CLI ([`cli`]).
//!
//! roostd depends on this crate only for [`api`] and [`paths`], so the wire
//! types have exactly one definition.

pub mod api;
pub mod cli;
pub mod client;
pub mod paths;

pub use client::{Client, ClientError};
