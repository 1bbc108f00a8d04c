//! `embeddings.json` (docs/formats.md#embeddings-table): read by a streaming
//! reader straight into one flat `Vec<f32>`, written back atomically.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

use crate::contract::table::{check_labels, Table};
use crate::error::{Error, Result};
use crate::util::hex;

impl Table {
    /// Loads and validates `embeddings.json` (both shapes of docs/formats.md#embeddings-table).
    pub fn load_json(path: &str) -> Result<Table> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::parse_json(path, &bytes)
    }

    pub fn parse_json(path: &str, bytes: &[u8]) -> Result<Table> {
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(Error::input(path, "the file is empty"));
        }
        let sha256 = hex(&Sha256::digest(bytes));
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let parsed = TopLevel.deserialize(&mut de).and_then(|p| de.end().map(|_| p));
        let parsed = parsed.map_err(|e| {
            let msg = e.to_string();
            let msg = if e.is_eof() { format!("the file is truncated ({msg})") } else { msg };
            Error::input(path, msg)
        })?;
        let rows = parsed.rows.ok_or_else(|| Error::input(path, "the object has no \"embeddings\" array"))?;
        let n = rows.n;
        let dim = rows.dim.unwrap_or(0);
        check_labels(path, n, parsed.ids.as_ref().map(Vec::len), parsed.titles.as_ref().map(Vec::len))?;
        let mut table = Table::from_rows(path, n, dim, rows.data, Some(sha256))?;
        table.model = parsed.model;
        table.ids = parsed.ids;
        table.titles = parsed.titles;
        Ok(table)
    }

    /// Writes the table as an `embeddings.json` object (atomically): its model,
    /// ids and titles where it has them, then the rows. Each value is written
    /// as the shortest decimal that reads back to the same f32.
    pub fn write_json(&self, path: &str) -> Result<()> {
        use std::io::Write;
        crate::durable::atomic::write_atomically(path, |w| {
            write!(w, "{{\"model\": ")?;
            serde_json::to_writer(&mut *w, &self.model)?;
            for (name, list) in [("ids", &self.ids), ("titles", &self.titles)] {
                if let Some(list) = list {
                    write!(w, ", \"{name}\": ")?;
                    serde_json::to_writer(&mut *w, list)?;
                }
            }
            writeln!(w, ", \"embeddings\": [")?;
            for j in 0..self.n {
                write!(w, "[")?;
                for (d, x) in self.row(j).iter().enumerate() {
                    if d > 0 {
                        write!(w, ",")?;
                    }
                    write!(w, "{x:?}")?;
                }
                writeln!(w, "]{}", if j + 1 < self.n { "," } else { "" })?;
            }
            writeln!(w, "]}}")?;
            Ok(())
        })
    }
}

// ---- streaming JSON reader -------------------------------------------------
// The table is read straight into one flat Vec<f32> (no Value tree), and each
// problem is reported with its row and column.

#[derive(Default)]
struct Rows {
    data: Vec<f32>,
    n: usize,
    dim: Option<usize>,
}

struct RowsSeed;

impl<'de> DeserializeSeed<'de> for RowsSeed {
    type Value = Rows;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Rows, D::Error> {
        d.deserialize_seq(RowsVisitor)
    }
}

struct RowsVisitor;

impl<'de> Visitor<'de> for RowsVisitor {
    type Value = Rows;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows (arrays of numbers)")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Rows, A::Error> {
        let mut rows = Rows::default();
        loop {
            let row = rows.n;
            let before = rows.data.len();
            let seed = RowSeed { rows: &mut rows, row };
            if seq.next_element_seed(seed)?.is_none() {
                break;
            }
            let width = rows.data.len() - before;
            match rows.dim {
                None => rows.dim = Some(width),
                Some(d) if d != width => {
                    return Err(de::Error::custom(format!(
                        "row {row} has {width} values but row 0 has {d} (ragged rows)"
                    )))
                }
                _ => {}
            }
            rows.n += 1;
        }
        Ok(rows)
    }
}

struct RowSeed<'a> {
    rows: &'a mut Rows,
    row: usize,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "row {} to be an array of numbers", self.row)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let mut col = 0usize;
        while let Some(x) = seq.next_element_seed(NumberSeed { row: self.row, col })? {
            // Nearest f64 (float_roundtrip parser), then one rounding to f32.
            let v = x as f32;
            if !v.is_finite() {
                return Err(de::Error::custom(format!(
                    "row {}, column {col}: value {x:e} overflows f32",
                    self.row
                )));
            }
            self.rows.data.push(v);
            col += 1;
        }
        Ok(())
    }
}

struct NumberSeed {
    row: usize,
    col: usize,
}

impl<'de> DeserializeSeed<'de> for NumberSeed {
    type Value = f64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a number at row {}, column {}", self.row, self.col)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<f64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<f64, E> {
        Ok(v as f64)
    }
}

#[derive(Default)]
struct Parsed {
    rows: Option<Rows>,
    model: Option<String>,
    ids: Option<Vec<String>>,
    titles: Option<Vec<String>>,
}

struct TopLevel;

impl<'de> DeserializeSeed<'de> for TopLevel {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Parsed, D::Error> {
        d.deserialize_any(self)
    }
}

/// An id may be a string or a number; both are kept as text.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum Id {
    Text(String),
    Number(serde_json::Number),
}

impl Id {
    pub(crate) fn into_text(self) -> String {
        match self {
            Id::Text(s) => s,
            Id::Number(n) => n.to_string(),
        }
    }
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Parsed;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of rows, or an object with an \"embeddings\" array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Parsed, A::Error> {
        let rows = RowsVisitor.visit_seq(seq)?;
        Ok(Parsed { rows: Some(rows), ..Default::default() })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Parsed, A::Error> {
        let mut parsed = Parsed::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "embeddings" => parsed.rows = Some(map.next_value_seed(RowsSeed)?),
                "model" => parsed.model = map.next_value::<Option<String>>()?,
                "ids" => {
                    let ids: Vec<Id> = map.next_value()?;
                    parsed.ids = Some(ids.into_iter().map(Id::into_text).collect());
                }
                "titles" => parsed.titles = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_to_nearest_f64_then_to_f32() -> Result<()> {
        // Nearest f64 of this decimal is exactly 1 + 2^-24, a tie that rounds
        // to even (1.0) in f32; a direct decimal -> f32 parse gives 1 + 2^-23.
        let t = Table::parse_json("t", b"[[1.00000005960464477539062500000001, 1], [0.1, 2]]")?;
        assert_eq!(t.data[0], 1.0);
        assert_eq!(t.data[2], 0.1f32);
        Ok(())
    }

    #[test]
    fn bad_tables_name_the_row() {
        let err = |s: &str| Table::parse_json("f.json", s.as_bytes()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err("[[1, 2], [3]]").contains("row 1 has 1 values"));
        assert!(err("[[1, 2], [3, true]]").contains("row 1, column 1"));
        assert!(err("[[1, 2], [0, 0]]").contains("row 1 is all zeros"));
        assert!(err("[[1, 2], [1, 1e39]]").contains("overflows f32"));
        assert!(err("[[1, 2]]").contains("at least 2"));
        assert!(err("  ").contains("empty"));
        assert!(err("[[1, 2], [1,").contains("truncated"));
        assert!(err("[[1, 2], [1, 2]] x").starts_with("f.json: "));
    }
}
