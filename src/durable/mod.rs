//! "Nothing lost": the one safe write path (`safe_write`, and its old name
//! `atomic`), the lock that keeps an output to one writer (`lock`), the
//! hashing reader and writer that check bytes as they pass (`hashing`), and
//! the checkpoint of an interrupted run (`checkpoint/`, which stores the
//! cache's bytes and so sits above `cache/`).
pub mod atomic;
pub mod checkpoint;
pub mod folder;
pub mod hashing;
pub mod lock;
pub mod safe_write;
