//! A table's file, told by its name: a NumPy `.npy` file (with its titles
//! sidecar, `npy.rs`) or an `embeddings.json` (`table.rs`). Above both
//! readers, so neither needs the other.

use crate::contract::table::Table;
use crate::error::{Error, Result};
use crate::table::npy;

/// The two file formats of a table, told apart by the file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Json,
    Npy,
}

impl TableFormat {
    pub fn of(path: &str) -> Option<TableFormat> {
        let ext = std::path::Path::new(path).extension()?;
        if ext.eq_ignore_ascii_case("npy") {
            Some(TableFormat::Npy)
        } else if ext.eq_ignore_ascii_case("json") {
            Some(TableFormat::Json)
        } else {
            None
        }
    }
}

/// Loads and validates a table: a NumPy `.npy` file (and its titles
/// sidecar) when the name ends in `.npy`, else `embeddings.json`.
pub fn load(path: &str) -> Result<Table> {
    match TableFormat::of(path) {
        Some(TableFormat::Npy) => npy::load(path),
        _ => Table::load_json(path),
    }
}

/// Writes the table (atomically) in the format its name ends in: `.npy`
/// (with its titles sidecar) or `.json`; any other name is refused.
pub fn write(table: &Table, path: &str) -> Result<()> {
    match TableFormat::of(path) {
        Some(TableFormat::Npy) => npy::write(table, path),
        Some(TableFormat::Json) => table.write_json(path),
        // Standard output (synth --out -): JSON, the text form.
        None if path == "-" => table.write_json(path),
        None => Err(Error::input(path, "a table is written as .npy or .json: the name must end in one of them")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::tmp;

    #[test]
    fn the_name_chooses_the_format_both_ways() -> Result<()> {
        let dir = tmp("table_file", "formats");
        let mut t = Table::from_rows("mem", 3, 2, vec![1.0, 0.5, 0.25, -2.0, 3.0, 4.0], None)?;
        t.titles = Some(vec!["a".into(), "b".into(), "c".into()]);
        for name in ["t.npy", "t.json", "T.NPY"] {
            let path = dir.join(name).display().to_string();
            write(&t, &path)?;
            let back = load(&path)?;
            assert_eq!((back.data, back.titles), (t.data.clone(), t.titles.clone()), "{name}");
        }
        let npy_bytes = std::fs::read(dir.join("t.npy")).map_err(|e| Error::io("t.npy", e))?;
        assert_eq!(&npy_bytes[..6], b"\x93NUMPY");
        let json_bytes = std::fs::read(dir.join("t.json")).map_err(|e| Error::io("t.json", e))?;
        assert_eq!(json_bytes[0], b'{');
        // Twin: another ending is refused, and nothing is written.
        let txt = dir.join("t.txt").display().to_string();
        let e = write(&t, &txt).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.ends_with("t.txt: a table is written as .npy or .json: the name must end in one of them"), "{e}");
        assert!(!dir.join("t.txt").exists());
        Ok(())
    }
}
