//! The shape of an embeddings table in JSON, counted without storing a
//! value: what `fp16_file` checks a meta file's N x D against (its checksum
//! binds the shape to the halves but is unkeyed, so the JSON's real shape
//! decides: a meta edited to another shape with its checksum recomputed).

use crate::error::{Error, Result};

/// The shape (rows, and the first row's values) of an embeddings table in
/// JSON, a bare array of rows or an object's `embeddings`, without storing a value.
pub fn json_shape(json_path: &str, json: &[u8]) -> Result<(usize, usize)> {
    use serde::Deserialize;
    let top = TableShape::deserialize(&mut serde_json::Deserializer::from_slice(json))
        .map_err(|e| Error::input(json_path, format!("not an embeddings table: {e}")))?;
    top.0.map(|r| (r.0, r.1)).ok_or_else(|| Error::input(json_path, "the object has no \"embeddings\" array"))
}

/// A row of the table: how many values it has.
struct RowLen(usize);
/// The rows of the table: how many, and the first one's length.
struct Rows(usize, usize);
/// The table's file: its rows, bare or under `embeddings`.
struct TableShape(Option<Rows>);

impl<'de> serde::Deserialize<'de> for RowLen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RowLen;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a row of numbers")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<RowLen, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(RowLen(n))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> serde::Deserialize<'de> for Rows {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Rows;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of rows")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Rows, A::Error> {
                let (mut n, mut dim) = (0, 0);
                while let Some(RowLen(len)) = seq.next_element()? {
                    if n == 0 {
                        dim = len;
                    }
                    n += 1;
                }
                Ok(Rows(n, dim))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> serde::Deserialize<'de> for TableShape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TableShape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an embeddings table")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> std::result::Result<TableShape, A::Error> {
                use serde::Deserialize;
                Ok(TableShape(Some(Rows::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<TableShape, A::Error> {
                let mut rows = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "embeddings" {
                        rows = Some(map.next_value::<Rows>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(TableShape(rows))
            }
        }
        d.deserialize_any(V)
    }
}
