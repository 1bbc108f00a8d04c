//! `divgpu verify`: a cache's sequences, of either form, recomputed by the
//! CPU mirror and compared, streamed a batch at a time (`Verifier::step`),
//! so memory does not grow with the cache: the reader's buffer, one batch of
//! sequences and the mirror's answer for it.
//!
//! What is checked: every sequence, the first K (`Selection::First`), or K
//! at the positions a seed picks (`Selection::Sample`, `sample`). What is
//! found: the cache agrees, it was made from another table (its header's
//! sha256, N or D are not the table's: nothing is recomputed), or the first
//! difference (position, start, step, both items). Input that cannot be read
//! or is not a valid cache is an error (`Error::Input`, `Error::Io`), never a
//! difference: the CLI tells the two apart by exit status (docs/cli.md).

use std::sync::Arc;

use crate::cache::cache_reader::{batch_sequences, count_sequences, Batch, CacheReader};
use crate::cache::sample::sample_positions;
use crate::contract::table::Table;
use super::{fp16, mirror};
use crate::error::{Error, Result};

/// Sequences per mirror call: enough for its threads, few enough that
/// progress is seen on a large table.
const MIRROR_BATCH: usize = 256;

/// Which of a cache's sequences `verify` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    All,
    /// The first K (`--sequences K`).
    First(usize),
    /// K at the positions `seed` picks (`--sample K --seed S`).
    Sample { k: usize, seed: u64 },
}

/// The first sequence the mirror does not agree with (0-based position and step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub position: usize,
    pub start: u32,
    pub step: usize,
    pub cache: u32,
    pub mirror: u32,
}

/// A cache being checked against its table.
pub struct Verifier {
    reader: CacheReader,
    table: Arc<Table>,
    /// The sequences the file holds.
    pub count: usize,
    /// How many will be checked, and how many are.
    pub total: usize,
    pub done: usize,
    /// The sample's positions (ascending), for `Selection::Sample`.
    pub positions: Option<Vec<usize>>,
    /// Why nothing is checked: the cache was made from another table.
    pub other_table: Option<String>,
    pub difference: Option<Difference>,
    batch: Batch,
}

/// The one line saying that `path`'s header names another table than `t`.
fn other_table(path: &str, reader: &CacheReader, t: &Table) -> Option<String> {
    let h = reader.header();
    if h.embeddings_sha256.eq_ignore_ascii_case(&t.sha256) && h.num_items == t.n && h.dim == t.dim {
        return None;
    }
    Some(format!(
        "{path} was made from another table (sha256 {}, {}x{}) than {} (sha256 {}, {}x{})",
        h.embeddings_sha256, h.num_items, h.dim, t.path, t.sha256, t.n, t.dim
    ))
}

/// The table the cache's contract runs on: fp16 caches on the half-rounded table.
fn contract_table(path: &str, contract: &str, table: Arc<Table>) -> Result<Arc<Table>> {
    match contract {
        "fp32" => Ok(table),
        "fp16" => {
            let halves = fp16::to_fp16(&table)?;
            Ok(Arc::new(fp16::widen(&table.path, table.n, table.dim, &halves, table.sha256.clone())?))
        }
        other => Err(Error::input(path, format!("unknown contract {other:?} (fp32 or fp16)"))),
    }
}

impl Verifier {
    /// Opens the cache at `path` (its header checked; for the binary form its
    /// starts and index too) to be checked against `table`.
    pub fn open(path: &str, table: Arc<Table>, selection: Selection) -> Result<Verifier> {
        let mut reader = CacheReader::open(path)?;
        let other = other_table(path, &reader, &table);
        let contract = reader.header().contract.clone();
        let table = if other.is_some() { table } else { contract_table(path, &contract, table)? };
        let count = match reader.count() {
            Some(count) => count,
            None => count_sequences(path)?,
        };
        if count == 0 {
            return Err(Error::input(path, "has no sequences: there is nothing to verify"));
        }
        let (total, positions) = match selection {
            Selection::All => (count, None),
            Selection::First(k) => (k.min(count), None),
            Selection::Sample { k, seed } => {
                let positions = sample_positions(count, k, seed);
                reader.select(positions.clone())?;
                (positions.len(), Some(positions))
            }
        };
        let total = if other.is_some() { 0 } else { total };
        Ok(Verifier {
            reader,
            table,
            count,
            total,
            done: 0,
            positions,
            other_table: other,
            difference: None,
            batch: Batch::default(),
        })
    }

    pub fn header(&self) -> &crate::cache::json::CacheHeader {
        self.reader.header()
    }

    pub fn form(&self) -> crate::cache::cache_io::Form {
        self.reader.form()
    }

    /// Whether every sequence asked for is checked or a difference found.
    pub fn finished(&self) -> bool {
        self.done >= self.total || self.difference.is_some()
    }

    /// Checks the next batch; returns whether more remain.
    pub fn step(&mut self) -> Result<bool> {
        if self.finished() {
            return Ok(false);
        }
        let length = self.reader.header().length;
        let max = batch_sequences(length).min(MIRROR_BATCH).min(self.total - self.done);
        let got = self.reader.next_batch(max, &mut self.batch)?;
        if got == 0 {
            let msg = format!("ends after {} sequences, before the {} to check", self.done, self.total);
            return Err(Error::input(self.reader.path(), msg));
        }
        let starts: Vec<u32> = (0..got).map(|i| self.batch.sequence(i)[0]).collect();
        let expected = mirror::run(&self.table, &starts, length).map_err(|e| Error::input(self.reader.path(), e.to_string()))?;
        if let Some(i) = self.batch.sequences.iter().zip(&expected).position(|(a, b)| a != b) {
            let (row, step) = (i / length, i % length);
            self.difference = Some(Difference {
                position: self.batch.positions[row],
                start: starts[row],
                step,
                cache: self.batch.sequences[i],
                mirror: expected[i],
            });
        }
        self.done += got;
        if self.done == self.total && self.difference.is_none() && self.reader.form().is_json() {
            // The JSON form reads on to its end, whatever was checked (every
            // sequence, the first K or a sample): the file's own checks, that
            // it holds starts_count sequences whose first items hash to
            // starts_sha256 (each start once, in order) and nothing after the
            // last. The binary form's were made on opening.
            let mut rest = Vec::new();
            while self.reader.next(&mut rest)?.is_some() {}
        }
        Ok(!self.finished())
    }
}

#[cfg(test)]
mod tests;
