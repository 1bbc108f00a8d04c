//! "Nothing lost": the one safe write path (`safe_write`, and its old name
//! `atomic`; its parts: `folder`, every file opened through its folder's
//! descriptor; `temp`, temporaries and the removal of killed commands';
//! `stream`, outputs that are descriptors; `target`, an output resolved
//! and checked; `output`, an output being written), the lock that keeps an output to one writer (`lock`), the
//! hashing reader and writer that check bytes as they pass (`hashing`), and
//! the checkpoint of an interrupted run (`checkpoint/`, which stores the
//! cache's bytes and so sits above `cache/`).
pub mod atomic;
pub mod checkpoint;
pub mod folder;
pub mod hashing;
pub mod lock;
pub mod output;
pub mod safe_write;
pub mod stream;
pub mod target;
pub mod temp;
