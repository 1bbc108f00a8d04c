//! The checkpoint of `run`, so that an interrupted run loses at most the
//! batches in progress (and those the Lua handle's writer thread has not yet
//! committed, `lua_api/checkpoint.rs`). It is the folder `OUT.checkpoint/`
//! beside the output `OUT` (beside a link's target when OUT is a link), and
//! `OUT.lock` beside it keeps it to one writer (`durable::lock`):
//!
//! - `sequences.part`: exactly the bytes the cache will have, up to the last
//!   committed batch, in the run's form (`cache_io::Form`): the JSON header
//!   and one sequence per line, or the binary head (header, starts, index)
//!   and fixed-width rows (docs/formats.md#checkpoint);
//! - `batches.jsonl`: one record per committed batch, appended and synced
//!   after the batch's bytes: its first sequence, its count, the offset where
//!   its bytes end, their sha256, and the sha256 of its starts. The records
//!   are the truth about what is committed;
//! - `state.json`: the job it belongs to (the table's sha256, N, D, the
//!   contract, the length, the starts' count and sha256, the divgpu version:
//!   everything that decides the bytes; method, layout and batch size do not),
//!   and a summary `done`/`bytes` rewritten after each commit for people and
//!   progress polls, never trusted on resume.
//!
//! A resume verifies every committed byte: each batch's sha256, its
//! sequences (length, items, and first items equal to this run's starts at
//! its place) against its record. From the first batch that fails (bytes
//! flipped, cut short, a torn record), the rest is dropped and recomputed, with
//! a note; a `done` in `state.json` that claims more than the records prove is
//! noted and ignored. A kill between appending and recording leaves bytes past
//! the last record, which a resume truncates. The finished cache is
//! `sequences.part` plus the closing bytes, synced and renamed onto OUT: the
//! file is streamed batch by batch (no N × L array in memory) and never
//! copied. The sequences are stored in the order of the starts, so a resume
//! may use another batch size, method or layout. A run of one shard (`run
//! --shard`) has its part's starts here, and its place in the whole run
//! (`shard`, in `state.json` and in the cache header: `cache::shard`).
//!
//! `StdoutCache` is the same interface for `run --out -`: the cache streamed
//! to standard output batch by batch (`cache_io::CacheWriter`), in either
//! form, with no checkpoint (nothing resumes).

mod commit;
mod open;
mod sink;
mod state;

pub use sink::{BatchSink, StdoutCache};
pub use state::{lock_note, Checkpoint, FORMAT, VERSION};

#[cfg(test)]
mod tests;
