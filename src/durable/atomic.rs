//! `write_atomically`, kept under its old name for its callers: the one safe
//! write path is `safe_write` (temporary file made exclusively beside the
//! resolved target, synced, renamed; links written through; non-regular
//! targets refused).

pub use crate::durable::safe_write::write_atomically;
