//! The JSON cache's streaming pieces: `head` (the bytes before the first
//! sequence), `read_head` (the header before `"sequences"`, checked) and
//! `Sequences` (the sequences, one at a time, never the whole array).

use std::io::Read;

use crate::cache::header::{PartHeader, Shard};
use crate::cache::json::{self, CacheHeader};
use crate::error::{Error, Result};

/// The bytes before the first sequence: a plain cache's head, or a part's.
pub fn head(header: &CacheHeader, shard: Option<&Shard>) -> Result<Vec<u8>> {
    match shard {
        None => json::head(header),
        Some(s) => json::head(&PartHeader { header: header.clone(), shard: Some(s.clone()) }),
    }
}

/// How far into a file the header may reach (a part's header is a few
/// hundred bytes).
const HEAD_LIMIT: u64 = 1 << 20;

/// A JSON cache's header, read from the start of `r`: the header (the text
/// before `"sequences"`, which divgpu writes last, checked), the bytes read
/// past the `[` that opens the sequences, and the file offset of the first.
pub(crate) fn read_head<R: Read>(path: &str, r: &mut R) -> Result<(PartHeader, Vec<u8>, u64)> {
    let mut buf = Vec::new();
    r.take(HEAD_LIMIT).read_to_end(&mut buf).map_err(|e| Error::io(path, e))?;
    const KEY: &[u8] = b"\"sequences\"";
    let pos = buf
        .windows(KEY.len())
        .position(|w| w == KEY)
        .ok_or_else(|| Error::input(path, "no \"sequences\" in its first MiB: not a cache written by divgpu run"))?;
    // `{ header fields ,` before the key: closed, it is the header's JSON.
    let mut text = buf[..pos].trim_ascii_end().to_vec();
    if text.pop() != Some(b',') {
        return Err(Error::input(path, "its header does not end before \"sequences\": not a cache written by divgpu run"));
    }
    text.push(b'}');
    let mut part: PartHeader = serde_json::from_slice(&text)
        .map_err(|e| Error::input(path, format!("its header cannot be read ({e}): not a cache written by divgpu run")))?;
    json::check_header(path, &part.header)?;
    part.lowercase_hashes();
    let mut i = pos + KEY.len();
    for want in [b':', b'['] {
        while buf.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        if buf.get(i) != Some(&want) {
            return Err(Error::input(path, format!("expected '{}' after \"sequences\" at byte {i}", want as char)));
        }
        i += 1;
    }
    let rest = buf.split_off(i);
    Ok((part, rest, i as u64))
}

/// Streams the sequences of a cache's `sequences` array, from just past its
/// `[`: JSON whitespace, arrays of non-negative integers, then `]}` and the
/// end of the file. Errors are one line with the byte offset.
pub(crate) struct Sequences<R: Read> {
    r: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// File offset of `buf[pos]`.
    offset: u64,
    /// Sequences read so far.
    count: usize,
    done: bool,
}

impl<R: Read> Sequences<R> {
    pub(crate) fn new(r: R, offset: u64) -> Self {
        Sequences::after(r, offset, 0)
    }

    /// A reader of the sequences that follow the first `count` (a
    /// checkpoint's batch: its first sequence has a comma before it unless
    /// `count` is 0).
    pub(crate) fn after(r: R, offset: u64, count: usize) -> Self {
        Sequences { r, buf: vec![0; 1 << 20].into_boxed_slice(), pos: 0, len: 0, offset, count, done: false }
    }

    /// Whether nothing but JSON whitespace is left.
    pub(crate) fn at_end(&mut self) -> std::result::Result<bool, String> {
        Ok(self.skip_ws()?.is_none())
    }

    fn peek(&mut self) -> std::result::Result<Option<u8>, String> {
        if self.pos == self.len {
            self.len = loop {
                match self.r.read(&mut self.buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(format!("read failed at byte {}: {e}", self.offset)),
                }
            };
            self.pos = 0;
            if self.len == 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.buf[self.pos]))
    }

    fn bump(&mut self) {
        self.pos += 1;
        self.offset += 1;
    }

    /// The next byte that is not JSON whitespace (not consumed).
    fn skip_ws(&mut self) -> std::result::Result<Option<u8>, String> {
        while let Some(b) = self.peek()? {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return Ok(Some(b));
            }
            self.bump();
        }
        Ok(None)
    }

    fn unexpected(&self, got: Option<u8>, want: &str) -> String {
        match got {
            Some(b) => format!("byte {}: expected {want}, found {:?}", self.offset, b as char),
            None => format!("byte {}: the file ends where {want} was expected (truncated)", self.offset),
        }
    }

    /// Reads the next sequence into `seq`; false after the last one. A
    /// sequence longer than `length` is an error as soon as it is, so memory
    /// stays one sequence whatever the file holds.
    pub(crate) fn next(&mut self, seq: &mut Vec<u32>, length: usize, num_items: usize) -> std::result::Result<bool, String> {
        if self.done {
            return Ok(false);
        }
        seq.clear();
        let b = self.skip_ws()?;
        if b == Some(b']') {
            self.bump();
            self.end()?;
            return Ok(false);
        }
        if self.count > 0 {
            if b != Some(b',') {
                return Err(self.unexpected(b, "',' or ']' after a sequence"));
            }
            self.bump();
        }
        let b = self.skip_ws()?;
        if b != Some(b'[') {
            return Err(self.unexpected(b, "'[' opening a sequence"));
        }
        self.bump();
        let i = self.count;
        if self.skip_ws()? == Some(b']') {
            self.bump();
        } else {
            loop {
                let step = seq.len();
                self.skip_ws()?;
                let x = self.number(i, step)?;
                if x as usize >= num_items {
                    return Err(format!("sequence {i}, step {step}: item {x} is out of range (the header says {num_items} items)"));
                }
                if seq.len() == length {
                    return Err(format!("sequence {i} has more than {length} items, the header says length {length}"));
                }
                seq.push(x);
                match self.skip_ws()? {
                    Some(b',') => self.bump(),
                    Some(b']') => {
                        self.bump();
                        break;
                    }
                    other => return Err(self.unexpected(other, "',' or ']' in a sequence")),
                }
            }
        }
        if seq.len() != length {
            return Err(format!("sequence {i} has {} items, the header says length {length}", seq.len()));
        }
        self.count += 1;
        Ok(true)
    }

    /// A JSON integer in 0..2^32 (no sign, fraction, exponent or leading zero).
    fn number(&mut self, i: usize, step: usize) -> std::result::Result<u32, String> {
        let start = self.offset;
        let mut x: u64 = 0;
        let mut digits = 0;
        while let Some(b @ b'0'..=b'9') = self.skip_digit()? {
            if digits == 1 && x == 0 {
                return Err(format!("byte {start}: sequence {i}, step {step}: a number with a leading zero"));
            }
            x = x * 10 + u64::from(b - b'0');
            if x > u64::from(u32::MAX) {
                return Err(format!("byte {start}: sequence {i}, step {step}: the item is past 2^32"));
            }
            digits += 1;
        }
        if digits == 0 {
            let b = self.peek()?;
            return Err(self.unexpected(b, "an item index (a non-negative integer)"));
        }
        Ok(x as u32)
    }

    fn skip_digit(&mut self) -> std::result::Result<Option<u8>, String> {
        match self.peek()? {
            Some(b) if b.is_ascii_digit() => {
                self.bump();
                Ok(Some(b))
            }
            _ => Ok(None),
        }
    }

    /// After the sequences' `]`: the object's `}` and nothing else.
    fn end(&mut self) -> std::result::Result<(), String> {
        let b = self.skip_ws()?;
        if b != Some(b'}') {
            return Err(self.unexpected(b, "'}' after the sequences (\"sequences\" is the last field divgpu writes)"));
        }
        self.bump();
        if let Some(b) = self.skip_ws()? {
            return Err(self.unexpected(Some(b), "the end of the file"));
        }
        self.done = true;
        Ok(())
    }
}
